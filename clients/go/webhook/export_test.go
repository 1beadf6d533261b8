package webhook

// DuplicateKey is duplicateKey, for the tests.
var DuplicateKey = duplicateKey
