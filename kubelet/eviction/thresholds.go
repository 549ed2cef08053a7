// Package eviction is the kubelet's node-pressure eviction policy, with
// upstream's rules: it parses eviction thresholds (--eviction-hard,
// --eviction-soft and their grace periods and minimum reclaims), turns a
// stats summary into signal observations, decides which thresholds are met
// (soft ones only after their grace period, a met one held until its
// minimum reclaim is freed), which node conditions are reported (held for
// the pressure transition period), ranks pods for eviction and words the
// eviction message.
//
// It owns decisions only: it reads no files, kills nothing and writes
// nothing to the API. The kubelet samples the node, reclaims node-level
// resources, stops the pods and posts their status.
package eviction

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Signal is an eviction signal, named as the kubelet names them.
type Signal string

// The signals bonsai observes.
const (
	SignalMemoryAvailable   Signal = "memory.available"
	SignalNodeFsAvailable   Signal = "nodefs.available"
	SignalNodeFsInodesFree  Signal = "nodefs.inodesFree"
	SignalImageFsAvailable  Signal = "imagefs.available"
	SignalImageFsInodesFree Signal = "imagefs.inodesFree"
	SignalPIDAvailable      Signal = "pid.available"
)

// Resources the kubelet reclaims that are not API resource names.
const (
	ResourceInodes corev1.ResourceName = "inodes"
	ResourcePids   corev1.ResourceName = "pids"
)

// signalResource is what each signal starves; signalCondition is the node
// condition it reports.
var (
	signalResource = map[Signal]corev1.ResourceName{
		SignalMemoryAvailable:   corev1.ResourceMemory,
		SignalNodeFsAvailable:   corev1.ResourceEphemeralStorage,
		SignalNodeFsInodesFree:  ResourceInodes,
		SignalImageFsAvailable:  corev1.ResourceEphemeralStorage,
		SignalImageFsInodesFree: ResourceInodes,
		SignalPIDAvailable:      ResourcePids,
	}
	signalCondition = map[Signal]corev1.NodeConditionType{
		SignalMemoryAvailable:   corev1.NodeMemoryPressure,
		SignalNodeFsAvailable:   corev1.NodeDiskPressure,
		SignalNodeFsInodesFree:  corev1.NodeDiskPressure,
		SignalImageFsAvailable:  corev1.NodeDiskPressure,
		SignalImageFsInodesFree: corev1.NodeDiskPressure,
		SignalPIDAvailable:      corev1.NodePIDPressure,
	}
)

// Resource is what the signal starves.
func (s Signal) Resource() corev1.ResourceName { return signalResource[s] }

// Condition is the node condition the signal reports.
func (s Signal) Condition() corev1.NodeConditionType { return signalCondition[s] }

// Value is a threshold's amount: a quantity, or a fraction of capacity.
type Value struct {
	Quantity   *resource.Quantity
	Percentage float32
}

// Of is the amount the value stands for on a resource of this capacity.
func (v Value) Of(capacity *resource.Quantity) *resource.Quantity {
	if v.Quantity != nil {
		q := v.Quantity.DeepCopy()
		return &q
	}
	return resource.NewQuantity(int64(float64(v.Percentage)*float64(capacity.Value())), resource.BinarySI)
}

func (v Value) String() string {
	if v.Quantity != nil {
		return v.Quantity.String()
	}
	return strconv.FormatFloat(math.Round(float64(v.Percentage)*1e6)/1e4, 'f', -1, 64) + "%"
}

// Threshold is one eviction threshold: Signal below Value. A zero
// GracePeriod makes it hard (evict at once, with no pod grace).
type Threshold struct {
	Signal      Signal
	Value       Value
	GracePeriod time.Duration
	MinReclaim  *Value
}

// Hard says whether the threshold evicts as soon as it is met.
func (t Threshold) Hard() bool { return t.GracePeriod == 0 }

func (t Threshold) key() string {
	return fmt.Sprintf("%s<%s/%v", t.Signal, t.Value, t.GracePeriod)
}

// DefaultHard are the kubelet's hard thresholds when --eviction-hard is
// not given.
var DefaultHard = map[string]string{
	"memory.available":  "100Mi",
	"nodefs.available":  "10%",
	"nodefs.inodesFree": "5%",
	"imagefs.available": "15%",
}

// ParseMap reads a flag of "key<value" pairs (sep "<", as --eviction-hard
// and --eviction-soft) or "key=value" pairs (sep "=", as the grace periods
// and minimum reclaims), comma separated, with the kubelet's flag error.
func ParseMap(s, sep string) (map[string]string, error) {
	out := map[string]string{}
	for _, pair := range strings.Split(s, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, sep)
		if !ok {
			return nil, fmt.Errorf("malformed pair, expect string%sstring", sep)
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return out, nil
}

// Parse builds the thresholds from the flags' maps, with the kubelet's
// checks and messages. Every soft threshold needs a grace period.
func Parse(hard, soft, softGrace, minReclaim map[string]string) ([]Threshold, error) {
	var out []Threshold
	h, err := parseStatements(hard)
	if err != nil {
		return nil, err
	}
	out = append(out, h...)
	s, err := parseStatements(soft)
	if err != nil {
		return nil, err
	}
	grace := map[Signal]time.Duration{}
	for _, k := range sortedKeys(softGrace) {
		sig := Signal(k)
		if _, ok := signalResource[sig]; !ok {
			return nil, fmt.Errorf("unsupported eviction signal %v", sig)
		}
		d, err := time.ParseDuration(softGrace[k])
		if err != nil {
			return nil, err
		}
		if d < 0 {
			return nil, fmt.Errorf("invalid eviction grace period specified: %v, must be a positive value", softGrace[k])
		}
		grace[sig] = d
	}
	reclaim := map[Signal]Value{}
	for _, k := range sortedKeys(minReclaim) {
		sig, val := Signal(k), minReclaim[k]
		if _, ok := signalResource[sig]; !ok {
			return nil, fmt.Errorf("unsupported eviction signal %v", sig)
		}
		if strings.HasSuffix(val, "%") {
			p, err := parsePercentage(val)
			if err != nil {
				return nil, err
			}
			if p <= 0 {
				return nil, fmt.Errorf("eviction percentage minimum reclaim %v must be positive: %s", sig, val)
			}
			reclaim[sig] = Value{Percentage: p}
			continue
		}
		q, err := resource.ParseQuantity(val)
		if err != nil {
			return nil, err
		}
		if q.Sign() < 0 {
			return nil, fmt.Errorf("negative eviction minimum reclaim specified for %v", sig)
		}
		reclaim[sig] = Value{Quantity: &q}
	}
	for i := range s {
		d, ok := grace[s[i].Signal]
		if !ok {
			return nil, fmt.Errorf("grace period must be specified for the soft eviction threshold %v", s[i].Signal)
		}
		s[i].GracePeriod = d
	}
	out = append(out, s...)
	for i := range out {
		if r, ok := reclaim[out[i].Signal]; ok {
			out[i].MinReclaim = &r
		}
	}
	return out, nil
}

func parseStatements(m map[string]string) ([]Threshold, error) {
	var out []Threshold
	for _, k := range sortedKeys(m) {
		sig, val := Signal(k), m[k]
		if _, ok := signalResource[sig]; !ok {
			return nil, fmt.Errorf("unsupported eviction signal %v", sig)
		}
		if strings.HasSuffix(val, "%") {
			// 0% and 100% turn a threshold off, as the kubelet reads them.
			if val == "0%" || val == "100%" {
				continue
			}
			p, err := parsePercentage(val)
			if err != nil {
				return nil, err
			}
			if p < 0 {
				return nil, fmt.Errorf("eviction percentage threshold %v must be >= 0%%: %s", sig, val)
			}
			if p > 1 {
				return nil, fmt.Errorf("eviction percentage threshold %v must be <= 100%%: %s", sig, val)
			}
			out = append(out, Threshold{Signal: sig, Value: Value{Percentage: p}})
			continue
		}
		q, err := resource.ParseQuantity(val)
		if err != nil {
			return nil, err
		}
		if q.Sign() <= 0 {
			return nil, fmt.Errorf("eviction threshold %v must be positive: %s", sig, &q)
		}
		out = append(out, Threshold{Signal: sig, Value: Value{Quantity: &q}})
	}
	return out, nil
}

func parsePercentage(s string) (float32, error) {
	num := strings.TrimRight(s, "%")
	v, err := strconv.ParseFloat(num, 32)
	if err != nil {
		return 0, err
	}
	if math.IsNaN(v) {
		// ParseFloat takes "NaN", which no threshold can be compared to.
		return 0, &strconv.NumError{Func: "ParseFloat", Num: num, Err: strconv.ErrSyntax}
	}
	return float32(v) / 100, nil
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// HardQuantity is what the hard threshold of sig holds back on a resource
// of this capacity (0 when there is none): the part of capacity that
// allocatable leaves out.
func HardQuantity(thresholds []Threshold, sig Signal, capacity int64) int64 {
	for _, t := range thresholds {
		if t.Signal == sig && t.Hard() {
			return t.Value.Of(resource.NewQuantity(capacity, resource.BinarySI)).Value()
		}
	}
	return 0
}

// Allocatable is capacity less the reservations and the hard eviction
// thresholds, as the kubelet's node allocatable: never below zero.
func Allocatable(capacity, systemReserved, kubeReserved corev1.ResourceList, thresholds []Threshold) corev1.ResourceList {
	out := capacity.DeepCopy()
	for name, c := range capacity {
		q := c.DeepCopy()
		if r, ok := systemReserved[name]; ok {
			q.Sub(r)
		}
		if r, ok := kubeReserved[name]; ok {
			q.Sub(r)
		}
		switch name {
		case corev1.ResourceMemory:
			q.Sub(*resource.NewQuantity(HardQuantity(thresholds, SignalMemoryAvailable, c.Value()), resource.BinarySI))
		case corev1.ResourceEphemeralStorage:
			q.Sub(*resource.NewQuantity(HardQuantity(thresholds, SignalNodeFsAvailable, c.Value()), resource.BinarySI))
		}
		if q.Sign() < 0 {
			q = *resource.NewQuantity(0, q.Format)
		}
		out[name] = q
	}
	return out
}
