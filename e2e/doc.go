// Package e2e is Easel's end-to-end test suite: it runs the real gateway and
// workers (their Run functions, and the built binaries) against a private
// redis-server or the embedded miniredis, and drives them over HTTP as a
// client would. It is a module of its own because it imports both services,
// which must never import each other.
package e2e
