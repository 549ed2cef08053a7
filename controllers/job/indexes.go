package job

import (
	"slices"
	"strconv"
	"strings"
)

// indexSet is a set of completion indexes, written in the Job status as
// ordered, comma-separated intervals ("1,3-5,7").
type indexSet map[int]bool

// parseIndexes reads the interval form; entries that do not parse, or
// lie outside [0, completions), are dropped as upstream does.
func parseIndexes(s string, completions int) indexSet {
	set := indexSet{}
	if s == "" {
		return set
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		first, err := strconv.Atoi(lo)
		if err != nil {
			continue
		}
		last := first
		if isRange {
			if last, err = strconv.Atoi(hi); err != nil {
				continue
			}
		}
		for i := max(first, 0); i <= last && i < completions; i++ {
			set[i] = true
		}
	}
	return set
}

func (s indexSet) sorted() []int {
	out := make([]int, 0, len(s))
	for i := range s {
		out = append(out, i)
	}
	slices.Sort(out)
	return out
}

// String is the interval form.
func (s indexSet) String() string {
	var b strings.Builder
	ix := s.sorted()
	for i := 0; i < len(ix); {
		j := i
		for j+1 < len(ix) && ix[j+1] == ix[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(ix[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(ix[j]))
		}
		i = j + 1
	}
	return b.String()
}

// statusString is the form for a status field that is nil when empty.
func (s indexSet) statusString() *string {
	str := s.String()
	return &str
}
