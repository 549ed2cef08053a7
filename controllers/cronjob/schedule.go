package cronjob

import (
	"fmt"
	"time"

	"github.com/robfig/cron/v3"
	batchv1 "k8s.io/api/batch/v1"
)

// tooManyMissed is upstream's limit: more missed start times than this
// are reported (TooManyMissedTimes), and only the most recent one runs.
const tooManyMissed = 100

// nextDelta is added to each wake-up so that the schedule time has
// surely passed when the controller looks, as upstream does.
const nextDelta = 100 * time.Millisecond

// schedule is a CronJob's parsed schedule in its time zone.
type schedule struct {
	cron cron.Schedule
	loc  *time.Location
}

// parseSchedule reads spec.schedule (five fields or a descriptor such as
// @hourly) for the zone spec.timeZone names, or the controller's local
// zone as upstream when it names none.
func parseSchedule(cj *batchv1.CronJob) (*schedule, error) {
	loc := time.Local
	if tz := cj.Spec.TimeZone; tz != nil {
		var err error
		if loc, err = time.LoadLocation(*tz); err != nil {
			return nil, &timeZoneError{zone: *tz, err: err}
		}
	}
	s, err := cron.ParseStandard(cj.Spec.Schedule)
	if err != nil {
		return nil, err
	}
	return &schedule{cron: s, loc: loc}, nil
}

type timeZoneError struct {
	zone string
	err  error
}

func (e *timeZoneError) Error() string { return fmt.Sprintf("invalid timeZone: %q: %v", e.zone, e.err) }

// next is the first scheduled time after t; zero if there is none (a
// schedule such as February 30th).
func (s *schedule) next(t time.Time) time.Time {
	n := s.cron.Next(t.In(s.loc))
	if n.IsZero() {
		return n
	}
	return n.In(time.UTC)
}

// mostRecent is the latest scheduled time in (after, now], if any, and
// whether more than tooManyMissed times fell in that span.
func (s *schedule) mostRecent(after, now time.Time) (last time.Time, tooMany bool) {
	t := s.next(after)
	for n := 0; !t.IsZero() && !t.After(now); n++ {
		if n == tooManyMissed {
			return s.lastBefore(now, t), true
		}
		last = t
		t = s.next(t)
	}
	return last, false
}

// lastBefore finds the latest scheduled time at or before now, knowing
// that known is one: it looks back from now in doubling windows rather
// than walking through every missed time.
func (s *schedule) lastBefore(now, known time.Time) time.Time {
	for w := time.Minute; ; w *= 2 {
		from := now.Add(-w)
		if !from.After(known) {
			from = known
		}
		if t := s.next(from); !t.After(now) || from.Equal(known) {
			last := known
			for ; !t.IsZero() && !t.After(now); t = s.next(t) {
				last = t
			}
			return last
		}
	}
}
