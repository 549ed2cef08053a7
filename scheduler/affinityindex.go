package scheduler

import (
	"strings"
)

// The affinity index keeps InterPodAffinity's PreFilter from walking every
// pod in the cluster for every pod it places (as kube-scheduler does, on
// 16 goroutines): with required anti-affinity on 10,000 pods that walk is
// the whole cost of a scheduling cycle. Instead the cache counts, as pods
// come and go, per value of each topology key:
//
//   - existing pods' terms, grouped by what they are: the replicas of one
//     workload share one rule, so a new pod is matched against each rule
//     once, not against each pod;
//   - the existing pods matching an incoming pod's terms, kept up to date
//     for the last terms asked about: the replicas of one workload ask the
//     same question.
//
// Only pods on nodes the cache lists count, with their node's labels, as
// in a walk over the listed nodes.

// termKind is which of a pod's four term lists a term came from.
type termKind uint8

const (
	kindRequiredAnti termKind = iota
	kindRequired
	kindPreferred
	kindPreferredAnti
)

// maxMatchCounts bounds the incoming terms kept up to date; past it they
// are dropped and rebuilt when asked for again. Workloads' pods reach
// the scheduler interleaved (an informer's initial list comes in no
// particular order), so it holds the term sets of a few hundred of them.
const maxMatchCounts = 256

// topoCounts counts pods per value of one topology key; a node without
// the key counts for nothing.
type topoCounts struct {
	key    string
	counts map[string]int64
}

func (tc *topoCounts) add(nodeLabels map[string]string, n int64) {
	v, ok := nodeLabels[tc.key]
	if !ok {
		return
	}
	if tc.counts == nil {
		tc.counts = map[string]int64{}
	}
	if c := tc.counts[v] + n; c != 0 {
		tc.counts[v] = c
	} else {
		delete(tc.counts, v)
	}
}

// on is the count in the topology of a node with these labels.
func (tc *topoCounts) on(nodeLabels map[string]string) int64 {
	v, ok := nodeLabels[tc.key]
	if !ok {
		return 0
	}
	return tc.counts[v]
}

// termGroup is the existing pods that carry one term of one kind.
type termGroup struct {
	kind termKind
	term affinityTerm
	pods int
	topoCounts
}

type groupKey struct {
	kind termKind
	term string
}

// matchCounts is the existing pods that match every one of terms, counted
// once per term under that term's topology key.
type matchCounts struct {
	terms []affinityTerm
	per   []topoCounts
}

type affinityIndex struct {
	groups  map[groupKey]*termGroup
	matches map[string]*matchCounts
	// byPair files each of matches under one label pair its first term
	// requires, the one the fewest counted pods carry when it was asked
	// for, so a pod is checked only against the term sets it could
	// match; general holds those whose first term is not plain labels.
	byPair  map[labelPair][]*matchCounts
	general []*matchCounts
	// pairs counts the counted pods that carry each label pair.
	pairs map[labelPair]int
}

func newAffinityIndex() *affinityIndex {
	return &affinityIndex{groups: map[groupKey]*termGroup{}, matches: map[string]*matchCounts{},
		byPair: map[labelPair][]*matchCounts{}, pairs: map[labelPair]int{}}
}

// update counts (sign 1) or uncounts (-1) a pod on a node with these
// labels.
func (x *affinityIndex) update(cp *cachedPod, nodeLabels map[string]string, sign int64) {
	if a := cp.affinity; a != nil {
		x.updateGroups(kindRequiredAnti, a.requiredAnti, nodeLabels, sign)
		x.updateGroups(kindRequired, a.required, nodeLabels, sign)
		x.updateGroups(kindPreferred, a.preferred, nodeLabels, sign)
		x.updateGroups(kindPreferredAnti, a.preferredAnti, nodeLabels, sign)
	}
	count := func(m *matchCounts) {
		if matchesAll(m.terms, cp.pod) {
			for i := range m.per {
				m.per[i].add(nodeLabels, sign)
			}
		}
	}
	for k, v := range cp.pod.Labels {
		pair := labelPair{k, v}
		if n := x.pairs[pair] + int(sign); n > 0 {
			x.pairs[pair] = n
		} else {
			delete(x.pairs, pair)
		}
		for _, m := range x.byPair[pair] {
			count(m)
		}
	}
	for _, m := range x.general {
		count(m)
	}
}

func (x *affinityIndex) updateGroups(kind termKind, terms []affinityTerm, nodeLabels map[string]string, sign int64) {
	for i := range terms {
		k := groupKey{kind, terms[i].key}
		g := x.groups[k]
		if g == nil {
			if sign < 0 {
				continue
			}
			g = &termGroup{kind: kind, term: terms[i], topoCounts: topoCounts{key: terms[i].topologyKey}}
			x.groups[k] = g
		}
		g.pods += int(sign)
		g.add(nodeLabels, sign)
		if g.pods <= 0 {
			delete(x.groups, k)
		}
	}
}

// matching returns the counts of existing pods matching all of terms,
// counting them over the listed nodes the first time they are asked for.
func (x *affinityIndex) matching(terms []affinityTerm, nodes []*NodeInfo) *matchCounts {
	var b strings.Builder
	for i := range terms {
		b.WriteString(terms[i].key)
		b.WriteByte(0)
	}
	key := b.String()
	if m := x.matches[key]; m != nil {
		return m
	}
	if len(x.matches) >= maxMatchCounts {
		clear(x.matches)
		clear(x.byPair)
		x.general = nil
	}
	m := &matchCounts{terms: terms, per: make([]topoCounts, len(terms))}
	for i := range terms {
		m.per[i].key = terms[i].topologyKey
	}
	for _, ni := range nodes {
		for _, cp := range ni.pods {
			if matchesAll(terms, cp.pod) {
				for i := range m.per {
					m.per[i].add(ni.Node.Labels, 1)
				}
			}
		}
	}
	x.matches[key] = m
	if pl := terms[0].matchLabels; len(pl) > 0 {
		rarest := pl[0]
		for _, p := range pl[1:] {
			if x.pairs[p] < x.pairs[rarest] {
				rarest = p
			}
		}
		x.byPair[rarest] = append(x.byPair[rarest], m)
	} else {
		x.general = append(x.general, m)
	}
	return m
}
