package scheduler

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// DefaultSchedulerName is the scheduler pods get when they name none.
const DefaultSchedulerName = corev1.DefaultSchedulerName

// Options tune the scheduler; DefaultOptions are Kubernetes' defaults.
type Options struct {
	// PercentageOfNodesToScore bounds how many feasible nodes a cycle
	// looks for before scoring; 0 is Kubernetes' adaptive rule (50% at
	// 100 nodes falling to 5%, never fewer than 100 nodes).
	PercentageOfNodesToScore int32
	InitialBackoff           time.Duration
	MaxBackoff               time.Duration
	// ScoreWeights are the enabled score plugins and their weights.
	ScoreWeights map[string]int64
	// FitStrategy is NodeResourcesFit's scoring (LeastAllocated or
	// MostAllocated) over FitResources.
	FitStrategy       string
	FitResources      []ResourceSpec
	BalancedResources []ResourceSpec
}

// DefaultOptions are kube-scheduler's default profile.
func DefaultOptions() Options {
	return Options{
		InitialBackoff: time.Second,
		MaxBackoff:     10 * time.Second,
		ScoreWeights: map[string]int64{
			TaintTolerationName:    3,
			NodeAffinityName:       2,
			NodeResourcesFitName:   1,
			BalancedAllocationName: 1,
			ImageLocalityName:      1,
			InterPodAffinityName:   2,
			PodTopologySpreadName:  2,
		},
		FitStrategy:       LeastAllocated,
		FitResources:      []ResourceSpec{{Name: corev1.ResourceCPU, Weight: 1}, {Name: corev1.ResourceMemory, Weight: 1}},
		BalancedResources: []ResourceSpec{{Name: corev1.ResourceCPU, Weight: 1}, {Name: corev1.ResourceMemory, Weight: 1}},
	}
}

// fileConfig is the part of kube-scheduler's KubeSchedulerConfiguration
// (kubescheduler.config.k8s.io/v1) bonsai reads, with its field names.
type fileConfig struct {
	APIVersion               string        `json:"apiVersion"`
	Kind                     string        `json:"kind"`
	PercentageOfNodesToScore *int32        `json:"percentageOfNodesToScore"`
	PodInitialBackoffSeconds *int64        `json:"podInitialBackoffSeconds"`
	PodMaxBackoffSeconds     *int64        `json:"podMaxBackoffSeconds"`
	Profiles                 []fileProfile `json:"profiles"`
}

type fileProfile struct {
	SchedulerName string             `json:"schedulerName"`
	Plugins       *filePlugins       `json:"plugins"`
	PluginConfig  []filePluginConfig `json:"pluginConfig"`
}

type filePlugins struct {
	Score filePluginSet `json:"score"`
}

type filePluginSet struct {
	Enabled  []filePlugin `json:"enabled"`
	Disabled []filePlugin `json:"disabled"`
}

type filePlugin struct {
	Name   string `json:"name"`
	Weight *int32 `json:"weight"`
}

type filePluginConfig struct {
	Name string          `json:"name"`
	Args json.RawMessage `json:"args"`
}

type scoringStrategy struct {
	Type      string         `json:"type"`
	Resources []ResourceSpec `json:"resources"`
}

// LoadOptions reads a KubeSchedulerConfiguration file (YAML or JSON).
// Its one profile must be default-scheduler's; fields bonsai does not
// implement are refused, not ignored.
func LoadOptions(path string) (Options, error) {
	o := DefaultOptions()
	data, err := os.ReadFile(path)
	if err != nil {
		return o, err
	}
	var fc fileConfig
	if err := yaml.UnmarshalStrict(data, &fc); err != nil {
		return o, fmt.Errorf("%s: %w", path, err)
	}
	if err := fc.apply(&o); err != nil {
		return o, fmt.Errorf("%s: %w", path, err)
	}
	return o, nil
}

var scorePlugins = map[string]bool{
	TaintTolerationName: true, NodeAffinityName: true, NodeResourcesFitName: true,
	BalancedAllocationName: true, ImageLocalityName: true, InterPodAffinityName: true,
	PodTopologySpreadName: true,
}

func (fc *fileConfig) apply(o *Options) error {
	if fc.Kind != "" && fc.Kind != "KubeSchedulerConfiguration" {
		return fmt.Errorf("kind %q: want KubeSchedulerConfiguration", fc.Kind)
	}
	if v := fc.PercentageOfNodesToScore; v != nil {
		if *v < 0 || *v > 100 {
			return fmt.Errorf("percentageOfNodesToScore %d: must be 0 to 100", *v)
		}
		o.PercentageOfNodesToScore = *v
	}
	if v := fc.PodInitialBackoffSeconds; v != nil {
		if *v <= 0 {
			return fmt.Errorf("podInitialBackoffSeconds %d: must be positive", *v)
		}
		o.InitialBackoff = time.Duration(*v) * time.Second
	}
	if v := fc.PodMaxBackoffSeconds; v != nil {
		if *v <= 0 {
			return fmt.Errorf("podMaxBackoffSeconds %d: must be positive", *v)
		}
		o.MaxBackoff = time.Duration(*v) * time.Second
	}
	if o.MaxBackoff < o.InitialBackoff {
		return fmt.Errorf("podMaxBackoffSeconds must not be less than podInitialBackoffSeconds")
	}
	if len(fc.Profiles) > 1 {
		return fmt.Errorf("profiles: bonsai runs one profile, %q", DefaultSchedulerName)
	}
	for _, p := range fc.Profiles {
		if p.SchedulerName != "" && p.SchedulerName != DefaultSchedulerName {
			return fmt.Errorf("profiles[0].schedulerName %q: bonsai serves %q only", p.SchedulerName, DefaultSchedulerName)
		}
		if p.Plugins != nil {
			for _, d := range p.Plugins.Score.Disabled {
				if d.Name == "*" {
					o.ScoreWeights = map[string]int64{}
					continue
				}
				if !scorePlugins[d.Name] {
					return fmt.Errorf("plugins.score.disabled: unknown score plugin %q", d.Name)
				}
				delete(o.ScoreWeights, d.Name)
			}
			for _, e := range p.Plugins.Score.Enabled {
				if !scorePlugins[e.Name] {
					return fmt.Errorf("plugins.score.enabled: unknown score plugin %q", e.Name)
				}
				w := int64(1)
				if e.Weight != nil {
					if *e.Weight < 0 || *e.Weight > 100 {
						return fmt.Errorf("plugins.score.enabled %s: weight %d must be 0 to 100", e.Name, *e.Weight)
					}
					w = int64(*e.Weight)
				} else if d, ok := DefaultOptions().ScoreWeights[e.Name]; ok {
					w = d
				}
				o.ScoreWeights[e.Name] = w
			}
		}
		for _, pc := range p.PluginConfig {
			switch pc.Name {
			case NodeResourcesFitName:
				var args struct {
					ScoringStrategy *scoringStrategy `json:"scoringStrategy"`
				}
				if err := json.Unmarshal(pc.Args, &args); err != nil {
					return fmt.Errorf("pluginConfig %s: %w", pc.Name, err)
				}
				if s := args.ScoringStrategy; s != nil {
					switch s.Type {
					case "", LeastAllocated, MostAllocated:
					default:
						return fmt.Errorf("pluginConfig %s: scoringStrategy.type %q: want LeastAllocated or MostAllocated", pc.Name, s.Type)
					}
					if s.Type != "" {
						o.FitStrategy = s.Type
					}
					if len(s.Resources) > 0 {
						if err := checkResources(s.Resources); err != nil {
							return fmt.Errorf("pluginConfig %s: %w", pc.Name, err)
						}
						o.FitResources = s.Resources
					}
				}
			case BalancedAllocationName:
				var args struct {
					Resources []ResourceSpec `json:"resources"`
				}
				if err := json.Unmarshal(pc.Args, &args); err != nil {
					return fmt.Errorf("pluginConfig %s: %w", pc.Name, err)
				}
				if len(args.Resources) > 0 {
					if err := checkResources(args.Resources); err != nil {
						return fmt.Errorf("pluginConfig %s: %w", pc.Name, err)
					}
					o.BalancedResources = args.Resources
				}
			default:
				return fmt.Errorf("pluginConfig: plugin %q has no arguments in bonsai", pc.Name)
			}
		}
	}
	return nil
}

func checkResources(rs []ResourceSpec) error {
	for _, r := range rs {
		if r.Name == "" {
			return fmt.Errorf("resources: a resource needs a name")
		}
		if r.Weight < 1 || r.Weight > 100 {
			return fmt.Errorf("resources %s: weight %d must be 1 to 100", r.Name, r.Weight)
		}
	}
	return nil
}
