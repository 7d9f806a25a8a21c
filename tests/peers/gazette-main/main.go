// Command gazette-main is never run: this module exists to build Gazette's own binaries at the
// commit of Gazette's main branch it pins (see tools.go).
package main

func main() {}
