// Package txnname holds what the exactly-once sinks whose transactions
// live in another system (Kafka, PostgreSQL) share about their names,
// prefix-subtask-checkpoint.
package txnname

import (
	"slices"
	"strings"
)

// OldPrefixes collects the prefixes of restored transactions' names that
// differ from the sink's prefix now (it changed across the restore): a
// failed attempt may have left transactions under them, which the
// lingering cleanup must end too.
type OldPrefixes []string

// Note records the prefix of name if it is not current and not recorded
// yet, and returns it; ok is false otherwise (or if name is not
// prefix-subtask-checkpoint).
func (o *OldPrefixes) Note(current, name string) (prefix string, ok bool) {
	i := strings.LastIndexByte(name, '-')
	if i < 0 {
		return "", false
	}
	j := strings.LastIndexByte(name[:i], '-')
	if j <= 0 {
		return "", false
	}
	p := name[:j]
	if p == current || slices.Contains(*o, p) {
		return "", false
	}
	*o = append(*o, p)
	return p, true
}
