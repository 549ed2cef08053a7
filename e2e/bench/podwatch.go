package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protowire"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
)

// podEvent is what the scheduler suite needs of a pod watch event.
type podEvent struct {
	typ, name, nodeName, phase, resourceVersion string
}

// watchPodsLight follows the pods of namespace ns from resourceVersion rv
// with one protobuf watch (opened again from the last resourceVersion
// seen whenever the server ends it), and hands each event's type, name,
// node, phase and resourceVersion to seen, until ctx ends or the watch
// fails.
//
// It reads those five fields straight from the wire instead of decoding
// whole Pods through an informer. The bench shares the machine's two
// cores with the server it measures: an informer decoding every pod of a
// 2,000 pods/s burst took a quarter of a core, which the server then did
// not have.
func watchPodsLight(ctx context.Context, cs kubernetes.Interface, ns, rv string, seen func(podEvent)) error {
	for ctx.Err() == nil {
		body, err := cs.CoreV1().RESTClient().Get().Namespace(ns).Resource("pods").
			VersionedParams(&metav1.ListOptions{Watch: true, ResourceVersion: rv, AllowWatchBookmarks: true}, scheme.ParameterCodec).
			SetHeader("Accept", "application/vnd.kubernetes.protobuf;stream=watch").
			Stream(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		err = readPodWatch(body, func(ev podEvent) {
			if ev.resourceVersion != "" {
				rv = ev.resourceVersion
			}
			if ev.typ != "BOOKMARK" {
				seen(ev)
			}
		})
		body.Close()
		if err != nil && ctx.Err() == nil {
			return err
		}
	}
	return nil
}

// readPodWatch reads length-prefixed protobuf watch frames from r until
// it ends; an ERROR event ends it with an error.
func readPodWatch(r io.Reader, each func(podEvent)) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var frame []byte
	for {
		var n [4]byte
		if _, err := io.ReadFull(br, n[:]); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return nil
			}
			return err
		}
		size := int(binary.BigEndian.Uint32(n[:]))
		if cap(frame) < size {
			frame = make([]byte, size)
		}
		frame = frame[:size]
		if _, err := io.ReadFull(br, frame); err != nil {
			return err
		}
		ev, err := parseWatchFrame(frame)
		if err != nil {
			return err
		}
		if ev.typ == "ERROR" {
			return fmt.Errorf("watch error event")
		}
		each(ev)
	}
}

// k8sProtobufMagic starts every protobuf-encoded object: the envelope
// (runtime.Unknown) follows it.
const k8sProtobufMagic = "k8s\x00"

// parseWatchFrame pulls a pod event's fields out of one frame: a
// metav1.WatchEvent (raw, as watch streams frame it), whose object is a
// Pod in the protobuf envelope.
func parseWatchFrame(event []byte) (podEvent, error) {
	var ev podEvent
	var object []byte
	err := protoFields(event, func(num protowire.Number, b []byte) {
		switch num {
		case 1: // type
			ev.typ = string(b)
		case 2: // object: RawExtension{raw: 1}
			protoFields(b, func(num protowire.Number, raw []byte) {
				if num == 1 {
					object = raw
				}
			})
		}
	})
	if err != nil || object == nil {
		return ev, errors.Join(err, errors.New("watch event without an object"))
	}
	pod, err := unwrap(object)
	if err != nil {
		return ev, err
	}
	err = protoFields(pod, func(num protowire.Number, b []byte) {
		switch num {
		case 1: // metadata: name 1, resourceVersion 6
			protoFields(b, func(num protowire.Number, v []byte) {
				switch num {
				case 1:
					ev.name = string(v)
				case 6:
					ev.resourceVersion = string(v)
				}
			})
		case 2: // spec: nodeName 10
			protoFields(b, func(num protowire.Number, v []byte) {
				if num == 10 {
					ev.nodeName = string(v)
				}
			})
		case 3: // status: phase 1
			protoFields(b, func(num protowire.Number, v []byte) {
				if num == 1 {
					ev.phase = string(v)
				}
			})
		}
	})
	return ev, err
}

// unwrap is the raw bytes of a protobuf-encoded object's envelope
// (runtime.Unknown: typeMeta 1, raw 2).
func unwrap(b []byte) ([]byte, error) {
	if !bytes.HasPrefix(b, []byte(k8sProtobufMagic)) {
		return nil, errors.New("not a protobuf-encoded object")
	}
	var raw []byte
	err := protoFields(b[len(k8sProtobufMagic):], func(num protowire.Number, v []byte) {
		if num == 2 {
			raw = v
		}
	})
	return raw, err
}

// protoFields calls each for every length-delimited field of message b,
// skipping the others.
func protoFields(b []byte, each func(protowire.Number, []byte)) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			each(num, v)
			b = b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
	}
	return nil
}

// sinceList lists the pods of ns once and follows them from there.
func sinceList(ctx context.Context, cs kubernetes.Interface, ns string, seen func(podEvent)) (<-chan error, error) {
	list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, p := range list.Items {
		seen(podEvent{typ: "ADDED", name: p.Name, nodeName: p.Spec.NodeName, phase: string(p.Status.Phase), resourceVersion: p.ResourceVersion})
	}
	done := make(chan error, 1)
	go func() { done <- watchPodsLight(ctx, cs, ns, list.ResourceVersion, seen) }()
	return done, nil
}
