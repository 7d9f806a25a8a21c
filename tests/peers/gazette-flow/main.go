// Command gazette-flow is never run: this module exists to build Gazette's own binaries at the
// version Estuary Flow pins (see tools.go).
package main

func main() {}
