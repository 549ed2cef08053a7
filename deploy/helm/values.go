package helm

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"helm.sh/helm/v3/pkg/strvals"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// parseValues reads a valuesContent; field names it in the error.
func parseValues(field, content string) (map[string]any, error) {
	vals := map[string]any{}
	if strings.TrimSpace(content) == "" {
		return vals, nil
	}
	if err := yaml.Unmarshal([]byte(content), &vals); err != nil {
		return nil, fmt.Errorf("%s: %v", field, err)
	}
	if vals == nil { // "null", or comments only
		vals = map[string]any{}
	}
	return vals, nil
}

// mergeValues merges src over dst as helm merges its --values files, in
// k3s's order (the HelmChart's, then its HelmChartConfig's): maps merge
// key by key, anything else in src replaces what dst has.
func mergeValues(dst, src map[string]any) map[string]any {
	out := make(map[string]any, len(dst))
	for k, v := range dst {
		out[k] = v
	}
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := out[k].(map[string]any); ok {
				out[k] = mergeValues(dm, sm)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// applySet applies spec.set over vals as k3s's job does: integers,
// booleans and null as helm's --set types them, anything else as a
// string (--set-string), keys in order.
func applySet(vals map[string]any, set map[string]intstr.IntOrString) error {
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := set[k]
		var err error
		if typedValue(v) {
			err = strvals.ParseInto(k+"="+v.String(), vals)
		} else {
			err = strvals.ParseIntoString(k+"="+unescapedComma.ReplaceAllStringFunc(v.String(), escapeComma), vals)
		}
		if err != nil {
			return fmt.Errorf("spec.set[%s]: %v", k, err)
		}
	}
	return nil
}

// typedValue: a number, true, false or null keeps helm's type.
func typedValue(v intstr.IntOrString) bool {
	if v.Type == intstr.Int {
		return true
	}
	switch strings.ToLower(v.StrVal) {
	case "true", "false", "null":
		return true
	}
	return false
}

// unescapedComma finds a comma and the backslashes before it: a comma is
// one value's, not the separator of two --set pairs.
var unescapedComma = regexp.MustCompile(`\\*,`)

func escapeComma(m string) string {
	if len(m)%2 == 1 { // an even number of backslashes before it
		return `\` + m
	}
	return m
}
