package proxy

import "slices"

// chooserIDs numbers the chains that choose an endpoint (see
// serviceObjects). A chooser's number is the first half of its keys in
// the endpoint maps the whole table shares, so it must be unique in the
// table and stay the same while the chooser exists: an endpoint change
// then rewrites only elements. A number is given back only once no
// chooser in the kernel uses it.
type chooserIDs struct {
	ids  map[string]uint32
	free []uint32
	next uint32
}

func newChooserIDs() *chooserIDs { return &chooserIDs{ids: map[string]uint32{}, next: 1} }

// get is the chooser's number, a new one if it has none.
func (c *chooserIDs) get(chooser string) uint32 {
	if id, ok := c.ids[chooser]; ok {
		return id
	}
	var id uint32
	if n := len(c.free); n > 0 {
		id, c.free = c.free[n-1], c.free[:n-1]
	} else {
		id = c.next
		c.next++
	}
	c.ids[chooser] = id
	return id
}

// release gives back the numbers of choosers old had and new has not,
// once the kernel holds new.
func (c *chooserIDs) release(old, new objects) {
	for _, name := range old.choosers {
		if !slices.Contains(new.choosers, name) {
			c.drop(name)
		}
	}
}

// keepOnly gives back every number but those of the choosers in all,
// once the kernel holds all and nothing else (after a full sync).
func (c *chooserIDs) keepOnly(all map[string]objects) {
	used := map[string]bool{}
	for _, o := range all {
		for _, name := range o.choosers {
			used[name] = true
		}
	}
	for name := range c.ids {
		if !used[name] {
			c.drop(name)
		}
	}
}

func (c *chooserIDs) drop(name string) {
	if id, ok := c.ids[name]; ok {
		delete(c.ids, name)
		c.free = append(c.free, id)
	}
}
