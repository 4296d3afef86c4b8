package processmanagers

// RecheckAfter is recheckAfter, for tests that must wait past it.
const RecheckAfter = recheckAfter
