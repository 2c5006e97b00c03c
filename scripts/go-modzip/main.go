// go-modzip writes a Go module's zip as the module proxy serves it (and `go mod download`
// fetches it): golang.org/x/mod/zip's layout (every file under <module>@<version>/) and its
// rules (no vendor/, no nested modules, no files go refuses), from a folder.
// Usage: go run . MODULE-PATH VERSION DIR OUT.zip
package main

import (
	"fmt"
	"os"

	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"
)

func main() {
	if len(os.Args) != 5 {
		fmt.Fprintln(os.Stderr, "usage: go-modzip MODULE-PATH VERSION DIR OUT.zip")
		os.Exit(2)
	}
	m := module.Version{Path: os.Args[1], Version: os.Args[2]}
	if err := module.Check(m.Path, m.Version); err != nil {
		fmt.Fprintln(os.Stderr, "go-modzip:", err)
		os.Exit(1)
	}
	f, err := os.Create(os.Args[4])
	if err == nil {
		err = modzip.CreateFromDir(f, m, os.Args[3])
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		os.Remove(os.Args[4])
		fmt.Fprintln(os.Stderr, "go-modzip:", err)
		os.Exit(1)
	}
}
