// Package fuzztape reads a fuzz input as a sequence of small choices: the
// model-based fuzz targets of the aggregates turn it into commands and
// their arguments, so the fuzzer's mutations become other sequences.
package fuzztape

// Tape is a fuzz input read a choice at a time; past its end every choice
// is zero, so any input, however short, is a whole sequence.
type Tape struct{ b []byte }

// New reads b.
func New(b []byte) *Tape { return &Tape{b: b} }

// More reports whether choices are left.
func (t *Tape) More() bool { return len(t.b) > 0 }

// Pick chooses among n, from 0 to n-1.
func (t *Tape) Pick(n int) int {
	if len(t.b) == 0 {
		return 0
	}
	c := t.b[0]
	t.b = t.b[1:]
	return int(c) % n
}
