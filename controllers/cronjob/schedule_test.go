package cronjob

import (
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
)

func TestMostRecent(t *testing.T) {
	at := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tc := range []struct {
		schedule    string
		after, now  string
		want        string // "" for none
		wantTooMany bool
	}{
		{"* * * * *", "2026-01-05T10:00:30Z", "2026-01-05T10:00:59Z", "", false},
		{"* * * * *", "2026-01-05T10:00:30Z", "2026-01-05T10:05:10Z", "2026-01-05T10:05:00Z", false},
		{"* * * * *", "2026-01-05T10:00:00Z", "2026-01-05T11:40:00Z", "2026-01-05T11:40:00Z", false}, // exactly 100
		{"* * * * *", "2026-01-05T10:00:00Z", "2026-01-05T13:20:30Z", "2026-01-05T13:20:00Z", true},
		{"@hourly", "2026-01-05T10:30:00Z", "2026-01-05T12:10:00Z", "2026-01-05T12:00:00Z", false},
		// Weekdays at 9: far behind, the last run is Friday's.
		{"0 9 * * 1-5", "2025-01-01T00:00:00Z", "2026-01-04T12:00:00Z", "2026-01-02T09:00:00Z", true},
		{"*/15 6-16/4 * * 1-5", "2025-06-01T00:00:00Z", "2026-01-05T15:00:00Z", "2026-01-05T14:45:00Z", true},
	} {
		cj := &batchv1.CronJob{Spec: batchv1.CronJobSpec{Schedule: tc.schedule, TimeZone: ptr("UTC")}}
		s, err := parseSchedule(cj)
		if err != nil {
			t.Fatalf("%s: %v", tc.schedule, err)
		}
		got, tooMany := s.mostRecent(at(tc.after), at(tc.now))
		gotS := ""
		if !got.IsZero() {
			gotS = got.UTC().Format(time.RFC3339)
		}
		if gotS != tc.want || tooMany != tc.wantTooMany {
			t.Errorf("%q after %s at %s: %q tooMany %v, want %q %v", tc.schedule, tc.after, tc.now, gotS, tooMany, tc.want, tc.wantTooMany)
		}
	}
}

func TestParseScheduleErrors(t *testing.T) {
	if _, err := parseSchedule(&batchv1.CronJob{Spec: batchv1.CronJobSpec{Schedule: "61 * * * *"}}); err == nil {
		t.Error("minute 61 parsed")
	}
	_, err := parseSchedule(&batchv1.CronJob{Spec: batchv1.CronJobSpec{Schedule: "* * * * *", TimeZone: ptr("Nowhere/Else")}})
	if _, ok := err.(*timeZoneError); !ok {
		t.Errorf("unknown zone: error %v, want a timeZoneError", err)
	}
}
