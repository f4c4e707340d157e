package window

import (
	"fmt"
	"slices"

	"github.com/weirstream/weir/state"
)

// A key's sessions are stored under the record key as one value: the
// encoded windows (16 bytes each), ascending by start. Sessions never
// intersect, so they are ascending by end too.

// loadSessions reads the current record key's sessions into c.sessions.
func (c *core) loadSessions() error {
	c.useKey()
	c.sessions = c.sessions[:0]
	c.dirty = false
	raw, ok, err := c.b.Get(c.sessionsID, nil)
	if err != nil || !ok {
		return err
	}
	if len(raw)%windowLen != 0 {
		return fmt.Errorf("%w: session set of %d bytes", state.ErrCorruptState, len(raw))
	}
	for ; len(raw) > 0; raw = raw[windowLen:] {
		w, err := decodeWindow(raw[:windowLen])
		if err != nil {
			return err
		}
		c.sessions = append(c.sessions, w)
	}
	return nil
}

// storeSessions writes c.sessions back if they changed.
func (c *core) storeSessions() error {
	if !c.dirty {
		return nil
	}
	c.dirty = false
	c.useKey()
	if len(c.sessions) == 0 {
		return c.b.Clear(c.sessionsID)
	}
	c.sessBuf = c.sessBuf[:0]
	for _, w := range c.sessions {
		c.sessBuf = appendWindow(c.sessBuf, w)
	}
	return c.b.Put(c.sessionsID, nil, c.sessBuf)
}

func (c *core) sessionIndex(w Window) int {
	i, found := slices.BinarySearchFunc(c.sessions, w.Start, func(s Window, start int64) int {
		return cmpInt(s.Start, start)
	})
	if found && c.sessions[i] == w {
		return i
	}
	return -1
}

func (c *core) removeSession(w Window) {
	if i := c.sessionIndex(w); i >= 0 {
		c.sessions = slices.Delete(c.sessions, i, i+1)
		c.dirty = true
	}
}

// addSession adds the new session n of the current record key to its
// sessions and returns the session n ends up in. n merges with every
// session it intersects (overlaps or touches) into the window covering
// them all; then, in order, the trigger merges its state into the result,
// each merged session's trigger is cleared and its cleanup timer deleted,
// and the merged sessions' contents are concatenated (by ascending start)
// into the result's.
func (c *core) addSession(n Window) (Window, error) {
	// The sessions intersecting n are consecutive: from the first that
	// ends at or after n.Start, while they start at or before n.End.
	lo, _ := slices.BinarySearchFunc(c.sessions, n.Start, func(s Window, start int64) int {
		return cmpInt(s.End, start)
	})
	hi := lo
	for hi < len(c.sessions) && c.sessions[hi].Start <= n.End {
		hi++
	}
	if lo == hi {
		c.sessions = slices.Insert(c.sessions, lo, n)
		c.dirty = true
		return n, nil
	}
	r := n
	for _, m := range c.sessions[lo:hi] {
		r = r.cover(m)
	}
	if hi-lo == 1 && c.sessions[lo] == r {
		return r, nil // n lies inside an existing session
	}
	c.merged = append(c.merged[:0], c.sessions[lo:hi]...)
	c.sessions = slices.Replace(c.sessions, lo, hi, r)
	c.dirty = true
	if err := c.triggerOnMerge(r, c.merged); err != nil {
		return r, err
	}
	for _, m := range c.merged {
		if err := c.triggerClear(m); err != nil {
			return r, err
		}
		if err := c.deleteCleanupTimer(m); err != nil {
			return r, err
		}
	}
	return r, c.mergeContents(r, c.merged)
}

// mergeContents makes r's contents those of ms concatenated (absent if
// all are absent) and removes theirs.
func (c *core) mergeContents(r Window, ms []Window) error {
	c.partBuf = c.partBuf[:0]
	type span struct{ from, to int }
	var spans [8]span
	sp := spans[:0]
	for _, m := range ms {
		c.useWindow(m)
		raw, ok, err := c.b.Get(c.contentsID, nil)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		from := len(c.partBuf)
		c.partBuf = append(c.partBuf, raw...)
		sp = append(sp, span{from, len(c.partBuf)})
		if err := c.b.Clear(c.contentsID); err != nil {
			return err
		}
	}
	c.useWindow(r)
	if len(sp) == 0 {
		return c.b.Clear(c.contentsID)
	}
	c.parts = c.parts[:0]
	for _, s := range sp {
		c.parts = append(c.parts, c.partBuf[s.from:s.to])
	}
	merged, err := c.store.mergeContents(c.mergeBuf[:0], c.parts)
	c.mergeBuf = merged
	if err != nil {
		return err
	}
	return c.b.Put(c.contentsID, nil, merged)
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
