package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
)

// Row is one line of the bench table: a figure of bonsai's, the target it
// is held to and, where a peer ran on this machine in the same run, the
// peer's figure under the same load.
type Row struct {
	Name string `json:"name"`
	// Unit is shared by the bonsai and peer figures ("ms", "writes/s",
	// "KB", "MB").
	Unit   string   `json:"unit"`
	Bonsai *float64 `json:"bonsai"`
	// PeerName is set when the row compares against a peer; Peer is nil if
	// that peer could not run.
	PeerName string   `json:"peer_name,omitempty"`
	Peer     *float64 `json:"peer,omitempty"`
	Target   *Target  `json:"target,omitempty"`
	Verdict  string   `json:"verdict"`
}

// Target is what a figure is held to.
type Target struct {
	Text string `json:"text"`
	// check reports whether bonsai's figure meets the target; applicable is
	// false when the target needs a peer figure that is missing.
	check func(bonsai float64, peer *float64) (ok, applicable bool)
}

func (t *Target) MarshalJSON() ([]byte, error) { return json.Marshal(t.Text) }

func atMost(limit float64, unit string) *Target {
	return &Target{
		Text:  fmt.Sprintf("<= %s %s", fmtNum(limit), unit),
		check: func(v float64, _ *float64) (bool, bool) { return v <= limit, true },
	}
}

func exactly(want float64, unit string) *Target {
	return &Target{
		Text:  fmt.Sprintf("= %s %s", fmtNum(want), unit),
		check: func(v float64, _ *float64) (bool, bool) { return v == want, true },
	}
}

func below(limit float64, unit string) *Target {
	return &Target{
		Text:  fmt.Sprintf("< %s %s", fmtNum(limit), unit),
		check: func(v float64, _ *float64) (bool, bool) { return v < limit, true },
	}
}

// atLeastPeerTimes holds a "more is better" figure to k times the peer's.
func atLeastPeerTimes(k float64, peer string) *Target {
	return &Target{
		Text: fmt.Sprintf(">= %sx %s", fmtNum(k), peer),
		check: func(v float64, p *float64) (bool, bool) {
			if p == nil {
				return false, false
			}
			return v >= k**p, true
		},
	}
}

// atMostAndBelowPeer holds a "less is better" figure to an absolute limit
// and to the peer's figure. Missing the limit is a miss even without a peer.
func atMostAndBelowPeer(limit float64, unit, peer string) *Target {
	return &Target{
		Text: fmt.Sprintf("<= %s %s, < %s", fmtNum(limit), unit, peer),
		check: func(v float64, p *float64) (bool, bool) {
			if v > limit {
				return false, true
			}
			if p == nil {
				return false, false
			}
			return v < *p, true
		},
	}
}

// verdict fills Row.Verdict: ok, MISS, n/a (no target, or its peer is
// missing) or ERR (bonsai's figure could not be measured).
func (r *Row) verdict() {
	switch {
	case r.Bonsai == nil:
		r.Verdict = "ERR"
	case r.Target == nil:
		r.Verdict = "n/a"
	default:
		ok, applicable := r.Target.check(*r.Bonsai, r.Peer)
		switch {
		case !applicable:
			r.Verdict = "n/a"
		case ok:
			r.Verdict = "ok"
		default:
			r.Verdict = "MISS"
		}
	}
}

func num(v float64) *float64 { return &v }

// fmtNum keeps three significant digits or so, with thousands separators
// for large figures.
func fmtNum(v float64) string {
	switch a := math.Abs(v); {
	case a < 1000 && v == math.Trunc(v):
		// Round figures (targets, counts) read better without decimals.
		return fmt.Sprintf("%.0f", v)
	case a >= 1000:
		s := fmt.Sprintf("%.0f", v)
		neg := strings.HasPrefix(s, "-")
		s = strings.TrimPrefix(s, "-")
		var b strings.Builder
		for i, c := range s {
			if i > 0 && (len(s)-i)%3 == 0 {
				b.WriteByte(',')
			}
			b.WriteRune(c)
		}
		if neg {
			return "-" + b.String()
		}
		return b.String()
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func fmtFigure(v *float64, unit string) string {
	if v == nil {
		return "-"
	}
	return fmtNum(*v) + " " + unit
}

// writeTable prints the rows as aligned plain text. When every row that has
// a peer names the same one, the peer column is headed with its name;
// otherwise each peer cell carries it.
func writeTable(w io.Writer, rows []Row) {
	peers := map[string]bool{}
	for _, r := range rows {
		if r.PeerName != "" {
			peers[r.PeerName] = true
		}
	}
	peerHead := "peer"
	single := len(peers) == 1
	if single {
		for p := range peers {
			peerHead = "peer (" + p + ")"
		}
	}
	cells := [][]string{{"row", "bonsai", "target", peerHead, "verdict"}}
	for _, r := range rows {
		target := "-"
		if r.Target != nil {
			target = r.Target.Text
		}
		peer := "-"
		if r.PeerName != "" {
			peer = fmtFigure(r.Peer, r.Unit)
			if !single && r.Peer != nil {
				peer += " (" + r.PeerName + ")"
			}
		}
		cells = append(cells, []string{r.Name, fmtFigure(r.Bonsai, r.Unit), target, peer, r.Verdict})
	}
	width := make([]int, len(cells[0]))
	for _, row := range cells {
		for i, c := range row {
			width[i] = max(width[i], len(c))
		}
	}
	for n, row := range cells {
		var b strings.Builder
		for i, c := range row {
			switch {
			case i == len(row)-1:
				b.WriteString(c)
			case i == 0:
				fmt.Fprintf(&b, "%-*s  ", width[i], c)
			default:
				// Figures are right-aligned so their digits line up.
				fmt.Fprintf(&b, "%*s  ", width[i], c)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
		if n == 0 {
			total := 0
			for _, wd := range width {
				total += wd + 2
			}
			fmt.Fprintln(w, strings.Repeat("-", total-2))
		}
	}
}
