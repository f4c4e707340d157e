package state

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/weirstream/weir/codec"
)

// StateSchema is what the bytes of one registered state mean: its kind
// and the identities of its codecs (codec.Identity). Checkpoints record the
// schema of every state of every operator, and a restored operator that
// registers a state under another schema is refused (SchemaError) before
// it reads any of it: the bytes would otherwise be decoded as something
// they are not.
type StateSchema struct {
	Name string
	// Kind is the keyed state's kind ("value", "list", "map", "reducing",
	// "aggregating"), "operator list (split)", "(union)" or "(broadcast)"
	// for operator state, or "key" for the codec of a keyed operator's
	// keys.
	Kind string
	TTL  bool // the values carry their expiry (keyed state with a TTL)
	// Codec is the identity of the values' codec (of a list's elements, a
	// map's values, an aggregating state's accumulator).
	Codec codec.Identity
	// UserKey is the identity of a map state's user-key codec.
	UserKey codec.Identity
}

// KindKey is the Kind of the schema of a keyed operator's keys.
const KindKey = "key"

func (s StateSchema) String() string {
	var b strings.Builder
	b.WriteString(s.Kind)
	if s.TTL {
		b.WriteString(" with TTL")
	}
	b.WriteString(" of ")
	if s.Kind == KindMap.String() {
		b.WriteString(s.UserKey.String() + " → ")
	}
	b.WriteString(s.Codec.String())
	return b.String()
}

func (s StateSchema) operatorState() bool { return strings.HasPrefix(s.Kind, "operator list") }

// ErrIncompatibleState is wrapped by every *SchemaError.
var ErrIncompatibleState = errors.New("state: a restored state does not match the state the operator declares")

// SchemaError is the error of registering a state whose schema differs
// from the one it was restored with.
type SchemaError struct {
	Operator   string // the operator's name
	Restored   StateSchema
	Registered StateSchema
}

func (e *SchemaError) Error() string {
	what := fmt.Sprintf("state %q", e.Restored.Name)
	if e.Restored.Kind == KindKey {
		what = "the keys"
	}
	return fmt.Sprintf("state: operator %s: %s restored from the checkpoint as %s, declared now as %s: the stored bytes would be read "+
		"as another type, so the restore is refused before any record; keep the state's kind and codec, give the new codec a way to "+
		"read the old values (codec.Evolve; not for keys), or give the state a new name", e.Operator, what, e.Restored, e.Registered)
}

func (e *SchemaError) Unwrap() error { return ErrIncompatibleState }

// Schemas holds the schemas of one backend's states: the ones the backend
// was restored with and the ones registered since. The typed states
// register their schema when they are created (GetValueState, …), the task
// records Snapshot in each checkpoint and hands a restored backend its
// schemas with Restore. A backend is used by one goroutine; so is its
// Schemas.
type Schemas struct {
	operator string
	restored map[string]StateSchema
	current  map[string]StateSchema
}

// SchemaHolder is implemented by the keyed backends that keep their
// states' schemas (heap and pebble do; the typed states check schemas only
// on backends that have them).
type SchemaHolder interface {
	StateSchemas() *Schemas
}

// Restore sets the schemas of the states restored into the backend of
// operator (its name, for errors).
func (s *Schemas) Restore(operator string, restored []StateSchema) {
	s.operator = operator
	s.restored = make(map[string]StateSchema, len(restored))
	for _, r := range restored {
		s.restored[r.Name] = r
	}
}

// Restored returns the schema state name was restored with, if any.
func (s *Schemas) Restored(name string) (StateSchema, bool) {
	r, ok := s.restored[name]
	return r, ok
}

// Snapshot lists the schemas to record in a checkpoint, sorted by name:
// every registered state's, and those of restored states not registered
// since (their values are still in the backend).
func (s *Schemas) Snapshot() []StateSchema {
	if s == nil || len(s.current)+len(s.restored) == 0 {
		return nil
	}
	out := make([]StateSchema, 0, len(s.current)+len(s.restored))
	for _, c := range s.current {
		out = append(out, c)
	}
	for name, r := range s.restored {
		if _, ok := s.current[name]; !ok {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b StateSchema) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// register records schema sc of a state, checking it against the one the
// state was restored with. reads (nil: none) reports whether the state's
// codec reads values of another identity (codec.Migrating). It returns the
// restored schema when the state's values must be migrated from it.
func (s *Schemas) register(sc StateSchema, reads func(codec.Identity) bool) (*StateSchema, error) {
	if cur, ok := s.current[sc.Name]; ok {
		if cur != sc {
			return nil, fmt.Errorf("state: state %q is registered as %s, requested as %s", sc.Name, cur, sc)
		}
		return nil, nil // registered (and migrated) before
	}
	if s.current == nil {
		s.current = map[string]StateSchema{}
	}
	r, ok := s.restored[sc.Name]
	if !ok || r == sc {
		s.current[sc.Name] = sc
		return nil, nil
	}
	if r.Kind != sc.Kind || r.TTL != sc.TTL || r.UserKey != sc.UserKey || reads == nil || !reads(r.Codec) {
		return nil, &SchemaError{Operator: s.operator, Restored: r, Registered: sc}
	}
	s.current[sc.Name] = sc
	return &r, nil
}

// schemasOf returns b's schemas, or nil if b keeps none.
func schemasOf(b KeyedBackend) *Schemas {
	if h, ok := b.(SchemaHolder); ok {
		return h.StateSchemas()
	}
	return nil
}

// RegisterKeyCodec records the codec of the keys of a keyed operator's
// backend b, checking it against the one its state was restored with
// (keys cannot migrate: their encoding places them in key groups).
func RegisterKeyCodec(b KeyedBackend, kc any) error {
	s := schemasOf(b)
	if s == nil {
		return nil
	}
	_, err := s.register(StateSchema{Name: "_key", Kind: KindKey, Codec: codec.IdentityOf(kc)}, nil)
	return err
}

// RegisterState registers keyed state name of kind in b for an operator
// core that keeps it in the typed states' layout: the value of a value
// state, each framed element of a list state, each value of a map state
// is c's encoding (a map's user keys are userKey's, a codec; nil for the
// other kinds). Its schema is recorded and checked at restore as the
// typed states' are (GetValueState and its siblings), and its values are
// migrated when c is a codec.Migrating that reads the restored ones.
func RegisterState[T any](b KeyedBackend, name string, kind Kind, c codec.Codec[T], userKey any) (StateID, error) {
	return registerKeyed(b, name, kind, c, userKey, TTL{})
}

// RegisterStateFormat registers keyed state name of kind in b whose bytes
// are laid out by its caller in the format that format names (a timer
// service's timers, a join's buffers: the format and the identities of
// the codecs inside it, see codec.FormatIdentity). Its schema is recorded
// and checked at restore as the typed states' are; it never migrates.
func RegisterStateFormat(b KeyedBackend, name string, kind Kind, format codec.Identity) (StateID, error) {
	if err := checkArgs(b, name, kind, true); err != nil {
		return 0, err
	}
	if s := schemasOf(b); s != nil {
		if _, err := s.register(StateSchema{Name: name, Kind: kind.String(), Codec: format}, nil); err != nil {
			return 0, err
		}
	}
	return b.Register(name, kind)
}

// registerKeyed registers keyed state name of kind with its codec (and a
// map's user-key codec) in b, checks its schema and migrates its values if
// its codec reads the restored ones. The schema is checked before the
// backend registers the state, so that a state restored as another kind
// fails with a *SchemaError naming both.
func registerKeyed[T any](b KeyedBackend, name string, kind Kind, c codec.Codec[T], userKey any, ttl TTL) (StateID, error) {
	if err := checkArgs(b, name, kind, c != nil && (kind != KindMap || userKey != nil)); err != nil {
		return 0, err
	}
	s := schemasOf(b)
	if s == nil {
		return b.Register(name, kind)
	}
	sc := StateSchema{Name: name, Kind: kind.String(), TTL: ttl.enabled(), Codec: codec.IdentityOf(c)}
	if kind == KindMap {
		sc.UserKey = codec.IdentityOf(userKey)
	}
	m, _ := c.(codec.Migrating[T])
	var reads func(codec.Identity) bool
	if m != nil {
		reads = m.Reads
	}
	from, err := s.register(sc, reads)
	if err != nil {
		return 0, err
	}
	id, err := b.Register(name, kind)
	if err != nil || from == nil {
		return id, err
	}
	if err := migrateKeyed(b, id, kind, ttl.enabled(), from.Codec, m); err != nil {
		return 0, fmt.Errorf("state: operator %s: migrating state %q from %s to %s: %w", s.operator, name, from, sc, err)
	}
	return id, nil
}

// migrateKeyed rewrites every value of state id, written under codec
// identity old, with m: decoded with DecodeFrom, encoded with Append.
func migrateKeyed[T any](b KeyedBackend, id StateID, kind Kind, ttl bool, old codec.Identity, m codec.Migrating[T]) error {
	conv := func(dst, src []byte) ([]byte, error) {
		if ttl {
			if len(src) < 8 {
				return nil, ErrCorruptState
			}
			dst = append(dst, src[:8]...)
			src = src[8:]
		}
		v, err := m.DecodeFrom(old, src)
		if err != nil {
			return nil, err
		}
		return m.Append(dst, v), nil
	}
	type entry struct {
		key     []byte
		group   int
		userKey []byte
		value   []byte
	}
	var entries []entry
	var convErr error
	err := b.Entries(id, func(key []byte, group int, userKey, value []byte) bool {
		var nv []byte
		if kind == KindList {
			for rest := value; len(rest) > 0 && convErr == nil; {
				var e []byte
				if e, rest, convErr = splitFramed(rest); convErr == nil {
					var ne []byte
					if ne, convErr = conv(nil, e); convErr == nil {
						nv = appendFramed(nv, ne)
					}
				}
			}
		} else {
			nv, convErr = conv(nil, value)
		}
		entries = append(entries, entry{slices.Clone(key), group, slices.Clone(userKey), nv})
		return convErr == nil
	})
	if err == nil {
		err = convErr
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		b.SetCurrentKey(e.key, e.group)
		if err := b.Put(id, e.userKey, e.value); err != nil {
			return err
		}
	}
	return nil
}
