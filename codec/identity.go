package codec

import (
	"reflect"
	"strings"
)

// Identity names the encoding a codec writes, so that a job restored from
// a checkpoint can tell whether the bytes of a state were written by the
// codec it reads them with: weir records the identity of every state's
// codecs in checkpoints and refuses to restore a state whose codec's
// identity differs (unless the codec is Migrating from it).
//
// Name names the codec and the type it encodes: the built-in codecs are
// "int64", "string", …; the composite ones name their components
// ("pair(int64,string)", "struct2[main.Acc](int32,int32)": field count and
// field types); any other codec, unless it is Identified, is named by its
// Go type ("codec.FuncCodec[main.Acc]"). Version is the codec's version
// or a fingerprint of its format: a codec whose format changes changes it.
type Identity struct {
	Name    string
	Version string
}

func (id Identity) String() string {
	if id.Version == "" {
		return id.Name
	}
	return id.Name + "@" + id.Version
}

// Identified is implemented by a codec that names its encoding itself
// (IdentityOf uses it).
type Identified interface {
	Identity() Identity
}

// IdentityOf returns the identity of codec c: c's own if it is Identified,
// else one named by c's Go type.
func IdentityOf(c any) Identity {
	if c == nil {
		return Identity{}
	}
	if id, ok := c.(Identified); ok {
		return id.Identity()
	}
	return Identity{Name: typeName(reflect.TypeOf(c))}
}

// typeName is t's name with its package paths shortened to their last
// element ("codec.FuncCodec[main.Acc]").
func typeName(t reflect.Type) string { return shortenPaths(t.String()) }

// shortenPaths drops the import path before each package name in a type
// string ("github.com/x/y.T" → "y.T").
func shortenPaths(s string) string {
	var b strings.Builder
	start := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[', ']', ',', ' ', '*', '(', ')':
			b.WriteString(lastElem(s[start:i]))
			b.WriteByte(s[i])
			start = i + 1
		}
	}
	b.WriteString(lastElem(s[start:]))
	return b.String()
}

func lastElem(s string) string {
	if i := strings.LastIndex(s, "/"); i >= 0 {
		return s[i+1:]
	}
	return s
}

// goType names type T for an identity.
func goType[T any]() string { return typeName(reflect.TypeFor[T]()) }

// Migrating is implemented by a codec that also reads values written by
// older codecs, for evolving the type of a state deliberately: a job
// restored from a checkpoint whose state was written under identity old
// accepts the state if Reads(old), and rewrites every value with
// DecodeFrom and the codec's own Append before using the state. Evolve
// makes such a codec.
type Migrating[T any] interface {
	Codec[T]
	// Reads reports whether DecodeFrom reads values encoded under old.
	Reads(old Identity) bool
	// DecodeFrom decodes a value encoded under old.
	DecodeFrom(old Identity, src []byte) (T, error)
}

// EvolvedCodec is c that also reads the values of an older codec (see
// Evolve).
type EvolvedCodec[T, Old any] struct {
	Codec[T]
	old     Codec[Old]
	oldID   Identity
	convert func(Old) T
}

// Evolve returns codec c that also reads state written by old: restored
// values of old's identity are decoded with old and converted with
// convert (once, when the state is restored). Evolve again to evolve
// further: the result reads every identity old reads. It panics if an
// argument is nil.
func Evolve[T, Old any](c Codec[T], old Codec[Old], convert func(Old) T) EvolvedCodec[T, Old] {
	if c == nil || old == nil || convert == nil {
		panic("codec: Evolve: nil argument")
	}
	return EvolvedCodec[T, Old]{Codec: c, old: old, oldID: IdentityOf(old), convert: convert}
}

// Identity is c's.
func (e EvolvedCodec[T, Old]) Identity() Identity { return IdentityOf(e.Codec) }

// FixedSize is c's, if it has one.
func (e EvolvedCodec[T, Old]) FixedSize() int { return fixedSize(e.Codec) }

// Reads reports whether id is old's identity, or one old reads.
func (e EvolvedCodec[T, Old]) Reads(id Identity) bool {
	if id == e.oldID {
		return true
	}
	m, ok := e.old.(Migrating[Old])
	return ok && m.Reads(id)
}

// DecodeFrom decodes a value written under id.
func (e EvolvedCodec[T, Old]) DecodeFrom(id Identity, src []byte) (T, error) {
	var v Old
	var err error
	if m, ok := e.old.(Migrating[Old]); ok && id != e.oldID {
		v, err = m.DecodeFrom(id, src)
	} else {
		v, err = e.old.Decode(src)
	}
	if err != nil {
		var zero T
		return zero, err
	}
	return e.convert(v), nil
}

// identities of the built-in codecs.

func (Int64Codec) Identity() Identity   { return Identity{Name: "int64"} }
func (Int32Codec) Identity() Identity   { return Identity{Name: "int32"} }
func (IntCodec) Identity() Identity     { return Identity{Name: "int"} }
func (Uint64Codec) Identity() Identity  { return Identity{Name: "uint64"} }
func (Uint32Codec) Identity() Identity  { return Identity{Name: "uint32"} }
func (Float64Codec) Identity() Identity { return Identity{Name: "float64"} }
func (Float32Codec) Identity() Identity { return Identity{Name: "float32"} }
func (BoolCodec) Identity() Identity    { return Identity{Name: "bool"} }
func (StringCodec) Identity() Identity  { return Identity{Name: "string"} }
func (BytesCodec) Identity() Identity   { return Identity{Name: "bytes"} }

// Identity names the pair and its components.
func (c PairCodec[A, B]) Identity() Identity { return composite("pair", "", c.a.c, c.b.c) }

// Identity names the triple and its components.
func (c TripleCodec[A, B, C]) Identity() Identity {
	return composite("triple", "", c.a.c, c.b.c, c.c.c)
}

// Identity names the struct type and its fields' codecs.
func (c Struct2Codec[T, A, B]) Identity() Identity {
	return composite("struct2", goType[T](), c.a.c, c.b.c)
}

// Identity names the struct type and its fields' codecs.
func (c Struct3Codec[T, A, B, C]) Identity() Identity {
	return composite("struct3", goType[T](), c.a.c, c.b.c, c.c.c)
}

// Identity names the struct type and its fields' codecs.
func (c Struct4Codec[T, A, B, C, D]) Identity() Identity {
	return composite("struct4", goType[T](), c.a.c, c.b.c, c.c.c, c.d.c)
}

// Identity names the element codec.
func (c SliceCodec[T]) Identity() Identity { return composite("slice", "", c.elem.c) }

// Identity names the JSON-encoded type.
func (JSONCodec[T]) Identity() Identity { return Identity{Name: "json[" + goType[T]() + "]"} }

// FormatIdentity is the identity of a format that lays out the encodings
// of the codecs parts inside its own framing (a join's buffered values
// with their timestamps): format(p1,p2,…), versioned by the parts'
// versions. A format whose own framing changes changes its name.
func FormatIdentity(format string, parts ...any) Identity { return composite(format, "", parts...) }

// WithIdentity returns c under identity id: a codec of bytes that another
// format laid out (see FormatIdentity) names that format.
func WithIdentity[T any](c Codec[T], id Identity) Codec[T] { return identified[T]{c, id} }

type identified[T any] struct {
	Codec[T]
	id Identity
}

func (c identified[T]) Identity() Identity { return c.id }
func (c identified[T]) FixedSize() int     { return fixedSize(c.Codec) }

// composite names a codec of components: name[typ](c1,c2,…), with the
// components' versions joined likewise as its version.
func composite(name, typ string, parts ...any) Identity {
	var n, v strings.Builder
	n.WriteString(name)
	if typ != "" {
		n.WriteString("[" + typ + "]")
	}
	n.WriteByte('(')
	versioned := false
	for i, p := range parts {
		if i > 0 {
			n.WriteByte(',')
			v.WriteByte(',')
		}
		id := IdentityOf(p)
		n.WriteString(id.Name)
		v.WriteString(id.Version)
		versioned = versioned || id.Version != ""
	}
	n.WriteByte(')')
	id := Identity{Name: n.String()}
	if versioned {
		id.Version = "(" + v.String() + ")"
	}
	return id
}
