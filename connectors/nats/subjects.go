package nats

import "strings"

// validName reports whether s can name a stream or consumer.
func validName(s string) bool {
	return s != "" && !strings.ContainsAny(s, " \t\r\n.*>/\\")
}

// validSubject reports whether s is a valid subject or subject filter:
// non-empty tokens separated by dots, '*' a whole token, '>' a whole and
// last token.
func validSubject(s string) bool {
	if s == "" || strings.ContainsAny(s, " \t\r\n") {
		return false
	}
	for rest := s; ; {
		tok, more, found := strings.Cut(rest, ".")
		switch {
		case tok == "":
			return false
		case tok == ">" && found:
			return false
		case tok != "*" && tok != ">" && strings.ContainsAny(tok, "*>"):
			return false
		}
		if !found {
			return true
		}
		rest = more
	}
}

// subjectMatches reports whether subject (literal) matches filter,
// without allocating.
func subjectMatches(filter, subject string) bool {
	for {
		ft, frest, fmore := strings.Cut(filter, ".")
		if ft == ">" {
			return subject != ""
		}
		st, srest, smore := strings.Cut(subject, ".")
		if ft != "*" && ft != st {
			return false
		}
		if fmore != smore {
			return false
		}
		if !fmore {
			return true
		}
		filter, subject = frest, srest
	}
}

// subjectsOverlap reports whether some subject matches both filters.
func subjectsOverlap(a, b string) bool {
	for {
		at, arest, amore := strings.Cut(a, ".")
		bt, brest, bmore := strings.Cut(b, ".")
		if at == ">" || bt == ">" {
			return true
		}
		if at != "*" && bt != "*" && at != bt {
			return false
		}
		if amore != bmore {
			return false
		}
		if !amore {
			return true
		}
		a, b = arest, brest
	}
}

// coveredBy reports whether filter can match messages of a stream with
// subjects (a stream without subjects, such as a mirror, is not checked).
func coveredBy(filter string, subjects []string) bool {
	if len(subjects) == 0 {
		return true
	}
	for _, s := range subjects {
		if subjectsOverlap(filter, s) {
			return true
		}
	}
	return false
}

// parseAck reads the stream sequence and timestamp (unix ns) from a
// JetStream message's reply subject, without allocating:
// $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<tm>.<pending>,
// or with <domain>.<account hash> before <stream> and a token after
// <pending>.
func parseAck(reply string) (seq, tm uint64, ok bool) {
	rest, found := strings.CutPrefix(reply, "$JS.ACK.")
	if !found {
		return 0, 0, false
	}
	var toks [10]string
	n := 0
	for n < len(toks) {
		tok, more, found := strings.Cut(rest, ".")
		toks[n] = tok
		n++
		if !found {
			rest = ""
			break
		}
		rest = more
	}
	// toks holds the tokens after $JS.ACK: 7 (v1) or at least 9 (v2).
	var first int
	switch {
	case n == 7 && rest == "":
		first = 0
	case n >= 9:
		first = 2
	default:
		return 0, 0, false
	}
	seq, ok1 := parseNum(toks[first+3])
	tm, ok2 := parseNum(toks[first+5])
	return seq, tm, ok1 && ok2 && seq > 0
}

func parseNum(s string) (uint64, bool) {
	if s == "" || len(s) > 20 {
		return 0, false
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	return n, true
}
