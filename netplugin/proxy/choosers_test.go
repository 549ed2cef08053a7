package proxy

import "testing"

func TestChooserIDs(t *testing.T) {
	c := newChooserIDs()
	a, b := c.get("service-a"), c.get("service-b")
	if a == b {
		t.Fatalf("two choosers share number %d", a)
	}
	if got := c.get("service-a"); got != a {
		t.Errorf("service-a's number changed from %d to %d", a, got)
	}
	// A chooser that goes gives its number back once the kernel has
	// the change; one that stays keeps it.
	c.release(objects{choosers: []string{"service-a", "local-a"}}, objects{choosers: []string{"local-a"}})
	if _, ok := c.ids["service-a"]; ok {
		t.Error("service-a kept its number after it went")
	}
	if got := c.get("service-c"); got != a {
		t.Errorf("service-c got %d, want service-a's freed %d", got, a)
	}
	// After a full sync only what the table holds keeps a number.
	c.keepOnly(map[string]objects{"default/c": {choosers: []string{"service-c"}}})
	if len(c.ids) != 1 || c.ids["service-c"] != a {
		t.Errorf("numbers after the full sync: %v, want only service-c: %d", c.ids, a)
	}
	if got := c.get("service-d"); got != b {
		t.Errorf("service-d got %d, want service-b's freed %d", got, b)
	}
}
