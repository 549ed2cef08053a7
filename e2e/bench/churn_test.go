package main

import (
	"strings"
	"testing"
	"time"
)

func mustDuration(s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		panic(err)
	}
	return d
}

// measuredChurn is a 10-minute churn of the default store, whose update
// rate rose from ~1,500/s to ~4,000/s as the machine went quiet: the raw
// size grew with the rate, the size per retained version did not.
var measuredChurn = []churnSample{
	{at: mustDuration("30s"), allocated: int64(115 * (1 << 20)), updates: 108046},
	{at: mustDuration("1m0s"), allocated: int64(240 * (1 << 20)), updates: 227624},
	{at: mustDuration("1m30s"), allocated: int64(344 * (1 << 20)), updates: 319182},
	{at: mustDuration("2m0s"), allocated: int64(377 * (1 << 20)), updates: 358367},
	{at: mustDuration("2m30s"), allocated: int64(482 * (1 << 20)), updates: 457467},
	{at: mustDuration("3m0s"), allocated: int64(519 * (1 << 20)), updates: 492658},
	{at: mustDuration("3m30s"), allocated: int64(535 * (1 << 20)), updates: 508313},
	{at: mustDuration("4m0s"), allocated: int64(600 * (1 << 20)), updates: 570557},
	{at: mustDuration("4m30s"), allocated: int64(709 * (1 << 20)), updates: 674602},
	{at: mustDuration("5m0s"), allocated: int64(796 * (1 << 20)), updates: 747595},
	{at: mustDuration("5m33s"), allocated: int64(834 * (1 << 20)), updates: 783287},
	{at: mustDuration("6m0s"), allocated: int64(866 * (1 << 20)), updates: 819468},
	{at: mustDuration("6m30s"), allocated: int64(978 * (1 << 20)), updates: 928545},
	{at: mustDuration("7m0s"), allocated: int64(1081 * (1 << 20)), updates: 1021579},
	{at: mustDuration("7m30s"), allocated: int64(950 * (1 << 20)), updates: 1091026},
	{at: mustDuration("8m0s"), allocated: int64(1009 * (1 << 20)), updates: 1157211},
	{at: mustDuration("8m30s"), allocated: int64(989 * (1 << 20)), updates: 1271969},
	{at: mustDuration("9m0s"), allocated: int64(1082 * (1 << 20)), updates: 1370681},
	{at: mustDuration("9m30s"), allocated: int64(1133 * (1 << 20)), updates: 1495821},
	{at: mustDuration("10m0s"), allocated: int64(1206 * (1 << 20)), updates: 1606044},
}

func TestChurnVerdict(t *testing.T) {
	v := churnVerdict(measuredChurn, retainFor)
	t.Log(v)
	if !strings.Contains(v, "ok (bounded") {
		t.Errorf("measured churn: %s", v)
	}
	// A leak: a steady rate, and the dir keeps growing with run time.
	var leak []churnSample
	for i := int64(1); i <= 20; i++ {
		leak = append(leak, churnSample{at: time.Duration(i) * 30 * time.Second, updates: i * 30_000, allocated: i * 30_000 * 2048})
	}
	if v := churnVerdict(leak, retainFor); !strings.Contains(v, "MISS") {
		t.Errorf("leaking store: %s", v)
	}
	if v := churnVerdict(measuredChurn[:8], retainFor); !strings.Contains(v, "run longer") {
		t.Errorf("short run: %s", v)
	}
}
