package pglock

import "time"

// EndLeftSession is endLeftSession, for the tests of package pglock_test.
var EndLeftSession = endLeftSession

// LeaveForTest records, as a holder named name would, that its session of
// server process pid, marked by a lock of key mark, was left at the server.
func (t *Tenures) LeaveForTest(name string, pid, mark int64) {
	t.set(name, Active, time.Now(), nil)
	t.leave(name, &session{pid: pid, mark: mark})
}

// LeftForTest reports whether name still remembers a session it left.
func (t *Tenures) LeftForTest(name string) bool { return t.left(name) != nil }
