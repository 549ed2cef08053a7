package kit

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func TestExpectations(t *testing.T) {
	type step func(e *Expectations, clock *clocktesting.FakePassiveClock)
	wait := func(d time.Duration) step {
		return func(_ *Expectations, c *clocktesting.FakePassiveClock) { c.SetTime(c.Now().Add(d)) }
	}
	for _, tc := range []struct {
		name  string
		steps []step
		want  bool
	}{
		{"nothing recorded", nil, true},
		{"1 of 2 creations seen", []step{
			func(e *Expectations, _ *clocktesting.FakePassiveClock) { e.Expect("a", 2, 0); e.Lower("a", 1, 0) },
		}, false},
		{"2 of 2 creations seen", []step{
			func(e *Expectations, _ *clocktesting.FakePassiveClock) {
				e.Expect("a", 2, 0)
				e.Lower("a", 1, 0)
				e.Lower("a", 1, 0)
			},
		}, true},
		{"creations given up on at once", []step{
			func(e *Expectations, _ *clocktesting.FakePassiveClock) { e.Expect("a", 5, 0); e.Lower("a", 5, 0) },
		}, true},
		{"a deletion outstanding", []step{
			func(e *Expectations, _ *clocktesting.FakePassiveClock) { e.Expect("a", 1, 2); e.Lower("a", 1, 1) },
		}, false},
		{"seen for another key", []step{
			func(e *Expectations, _ *clocktesting.FakePassiveClock) { e.Expect("a", 1, 0); e.Lower("b", 1, 0) },
		}, false},
		{"a named deletion seen twice counts once", []step{
			func(e *Expectations, _ *clocktesting.FakePassiveClock) {
				e.ExpectNames("a", "ns/p1", "ns/p2")
				e.Observed("a", "ns/p1")
				e.Observed("a", "ns/p1") // the update with deletionTimestamp, then the delete
			},
		}, false},
		{"every named deletion seen", []step{
			func(e *Expectations, _ *clocktesting.FakePassiveClock) {
				e.ExpectNames("a", "ns/p1", "ns/p2")
				e.Observed("a", "ns/p1")
				e.Observed("a", "ns/p2")
			},
		}, true},
		{"expecting replaces what was expected", []step{
			func(e *Expectations, _ *clocktesting.FakePassiveClock) {
				e.ExpectNames("a", "ns/p1")
				e.Expect("a", 0, 0)
			},
		}, true},
		{"added writes accumulate", []step{
			func(e *Expectations, _ *clocktesting.FakePassiveClock) {
				e.Add("a", "x")
				e.Add("a", "y")
				e.Observed("a", "x")
			},
		}, false},
		{"read off a list", []step{
			func(e *Expectations, _ *clocktesting.FakePassiveClock) {
				e.Add("a", "x")
				e.Add("a", "y")
				e.ObservedIf("a", func(n string) bool { return n == "x" || n == "y" })
			},
		}, true},
		{"not yet expired", []step{
			func(e *Expectations, _ *clocktesting.FakePassiveClock) { e.Expect("a", 5, 0) },
			wait(ExpectationsTimeout),
		}, false},
		{"expired", []step{
			func(e *Expectations, _ *clocktesting.FakePassiveClock) { e.Expect("a", 5, 0) },
			wait(ExpectationsTimeout + time.Second),
		}, true},
		{"an added write restarts the timeout", []step{
			func(e *Expectations, _ *clocktesting.FakePassiveClock) { e.Add("a", "x") },
			wait(4 * time.Minute),
			func(e *Expectations, _ *clocktesting.FakePassiveClock) { e.Add("a", "y") },
			wait(2 * time.Minute),
		}, false},
		{"lowering does not restart the timeout", []step{
			func(e *Expectations, _ *clocktesting.FakePassiveClock) { e.Expect("a", 5, 0) },
			wait(4 * time.Minute),
			func(e *Expectations, _ *clocktesting.FakePassiveClock) { e.Lower("a", 1, 0) },
			wait(2 * time.Minute),
		}, true},
		{"forgotten", []step{
			func(e *Expectations, _ *clocktesting.FakePassiveClock) { e.Expect("a", 5, 5); e.Forget("a") },
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
			e := NewExpectations(clock)
			for _, s := range tc.steps {
				s(e, clock)
			}
			if got := e.Satisfied("a"); got != tc.want {
				t.Errorf("Satisfied = %v, want %v", got, tc.want)
			}
		})
	}
}

// A named write stays Pending until seen; once its record is satisfied
// (here: expired) it is dropped, so nothing expired is waited on again.
func TestExpectationsPending(t *testing.T) {
	clock := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	e := NewExpectations(clock)
	e.Add("a", "x")
	if !e.Pending("a", "x") || e.Pending("a", "y") || e.Pending("b", "x") {
		t.Fatal("Pending: want only a's x")
	}
	clock.SetTime(clock.Now().Add(ExpectationsTimeout + time.Second))
	if !e.Pending("a", "x") {
		t.Fatal("expired but not yet looked at: want x still pending")
	}
	if !e.Satisfied("a") {
		t.Fatal("expired: want satisfied")
	}
	if e.Pending("a", "x") {
		t.Fatal("after an expired Satisfied: want x dropped")
	}
}
