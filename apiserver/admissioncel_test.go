package apiserver

import (
	"testing"

	"github.com/google/cel-go/cel"
)

// TestAdmissionCELLibraries checks that admission expressions get
// Kubernetes' CEL libraries, as on kube-apiserver: a policy using them
// must not be refused here.
func TestAdmissionCELLibraries(t *testing.T) {
	for _, expr := range []string{
		`quantity(object.spec.memory).isGreaterThan(quantity('512Mi'))`,
		`isURL(object.spec.url) && url(object.spec.url).getHost() == 'example.com'`,
		`object.spec.name.find('[0-9]+') == '42'`,
		`[1, 2, 3].isSorted() && [3, 1].max() == 3`,
		`isIP(object.spec.ip) && ip(object.spec.ip).family() == 4`,
		`cidr('10.0.0.0/8').containsIP(ip(object.spec.ip))`,
		`!format.dns1123Label().validate(object.spec.name).hasValue() && format.dns1123Label().validate('Not_A_Label').hasValue()`,
		`semver('1.2.3').isLessThan(semver('1.10.0'))`,
	} {
		p, err := compileCEL(expr, cel.BoolType)
		if err != nil {
			t.Errorf("%s: %v", expr, err)
			continue
		}
		obj := map[string]any{"spec": map[string]any{"memory": "1Gi", "url": "https://example.com/x", "name": "app42", "ip": "10.1.2.3"}}
		out, err := p.eval(map[string]any{"object": obj, "oldObject": nil, "request": map[string]any{}, "params": nil, "namespaceObject": nil, "variables": map[string]any{}})
		if err != nil {
			t.Errorf("%s: %v", expr, err)
			continue
		}
		if out.Value() != true {
			t.Errorf("%s = %v, want true", expr, out.Value())
		}
	}
}
