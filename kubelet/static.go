package kubelet

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"
)

// Annotations of static pods and their mirrors, as the kubelet sets them.
const (
	annoConfigSource = "kubernetes.io/config.source"
	annoConfigHash   = "kubernetes.io/config.hash"
	annoConfigMirror = "kubernetes.io/config.mirror"
	annoConfigSeen   = "kubernetes.io/config.seen"
)

// staticPods runs the pods whose manifests are files in dir: the node
// runs them on its own authority, and mirrors each into the API as a
// mirror pod (named <name>-<node>) that shows its status. Deleting the
// mirror does not stop the pod (it is recreated); removing the file does.
type staticPods struct {
	m   *podManager
	dir string
	// running maps a static pod's UID to its worker's pod name.
	running map[types.UID]string
	bad     map[string]time.Time // manifests already reported unreadable, by mtime
}

// run rescans every second; the first scan is done before (see start).
func (s *staticPods) run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.scan(ctx)
	}
}

// start scans once, so static pods have workers before the node's
// housekeeping looks for orphans, then keeps scanning.
func (s *staticPods) start(ctx context.Context) {
	s.running, s.bad = map[types.UID]string{}, map[string]time.Time{}
	s.scan(ctx)
	go s.run(ctx)
}

// scan reads the manifests, starts workers for new ones, refreshes the
// mirrors and ends the pods whose file went away.
func (s *staticPods) scan(ctx context.Context) {
	entries, _ := os.ReadDir(s.dir)
	seen := map[types.UID]bool{}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	for _, name := range names {
		if strings.HasPrefix(name, ".") || !(strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml") || strings.HasSuffix(name, ".json")) {
			continue
		}
		path := filepath.Join(s.dir, name)
		pod, err := s.read(path)
		if err != nil {
			st, _ := os.Stat(path)
			if st != nil && !s.bad[path].Equal(st.ModTime()) {
				s.bad[path] = st.ModTime()
				s.m.log.Error("static pod manifest is invalid; skipped", "file", path, "err", err)
			}
			continue
		}
		delete(s.bad, path)
		seen[pod.UID] = true
		mirror, err := s.ensureMirror(ctx, pod)
		if err != nil {
			s.m.log.Warn("static pod: mirror pod", "pod", podKey(pod), "err", err)
		}
		// The worker runs the API's defaulted spec under the static UID
		// and writes status to the mirror; without a mirror (the API
		// refused it) it runs the manifest as written.
		run, mirrorUID := pod, types.UID("")
		if mirror != nil {
			run = mirror.DeepCopy()
			run.UID, run.DeletionTimestamp, run.DeletionGracePeriodSeconds = pod.UID, nil, nil
			mirrorUID = mirror.UID
		}
		s.m.observeStatic(run, mirrorUID)
		s.running[pod.UID] = pod.Name
	}
	for uid := range s.running {
		if !seen[uid] {
			s.m.mu.Lock()
			w := s.m.workers[uid]
			s.m.mu.Unlock()
			if w != nil {
				p, _ := w.snapshot()
				w.update(p, true)
			}
			delete(s.running, uid)
		}
	}
}

// read decodes one manifest into the pod this node runs: named
// <name>-<node>, bound here, with a UID derived from the file's content
// (so an edit is a new pod, as on Kubernetes).
func (s *staticPods) read(path string) (*corev1.Pod, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(raw, &pod); err != nil {
		return nil, err
	}
	if pod.Kind != "" && pod.Kind != "Pod" {
		return nil, fmt.Errorf("kind %q: a static pod manifest holds one Pod", pod.Kind)
	}
	if pod.Name == "" {
		return nil, fmt.Errorf("metadata.name is required")
	}
	if pod.Namespace == "" {
		pod.Namespace = metav1.NamespaceDefault
	}
	node := s.m.cfg.NodeName
	sum := sha256.Sum256(append(append([]byte(nil), raw...), node...))
	hash := hex.EncodeToString(sum[:16])
	pod.Name = pod.Name + "-" + node
	pod.UID = types.UID(hash)
	pod.Spec.NodeName = node
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[annoConfigSource] = "file"
	pod.Annotations[annoConfigHash] = hash
	pod.Annotations[annoConfigMirror] = hash
	pod.ResourceVersion, pod.Status = "", corev1.PodStatus{}
	return &pod, nil
}

// ensureMirror makes the API hold the pod's mirror: created when missing,
// replaced when it mirrors an older manifest or someone deleted it.
func (s *staticPods) ensureMirror(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	c := s.m.client
	cur, err := c.getPod(ctx, pod.Namespace, pod.Name)
	if err == nil && cur.Annotations[annoConfigMirror] == pod.Annotations[annoConfigMirror] && cur.DeletionTimestamp == nil {
		return cur, nil
	}
	if err == nil {
		if err := c.deletePod(ctx, cur); err != nil && !apierrors.IsNotFound(err) {
			return nil, err
		}
	} else if !apierrors.IsNotFound(err) {
		return nil, err
	}
	m := pod.DeepCopy()
	m.UID = ""
	// Owned by the Node, as its controller: NodeRestriction admits no
	// other mirror pod from a kubelet.
	if s.m.nodeUID == "" {
		return nil, errors.New("the node's uid is not known yet")
	}
	controller := true
	m.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: s.m.cfg.NodeName, UID: s.m.nodeUID, Controller: &controller}}
	created, err := c.createPod(ctx, m)
	if apierrors.IsAlreadyExists(err) {
		return c.getPod(ctx, pod.Namespace, pod.Name)
	}
	return created, err
}

func isMirror(p *corev1.Pod) bool {
	_, ok := p.Annotations[annoConfigMirror]
	return ok
}
