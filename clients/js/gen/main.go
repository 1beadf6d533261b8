// Command gen writes the API's objects into the browser client's types
// (clients/js/gateway.d.ts) from the OpenAPI document the gateway serves
// (api/openapi.json): the schemas the client reads or sends and the schemas
// they refer to, between the file's BEGIN and END lines. The rest of the
// file, the client's own types, is written by hand. `go generate
// ./clients/js` runs it; its test fails while the checked-in declarations
// differ from what it would write, naming the schema and the property.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

// run rewrites the generated section of the declarations in place. It
// writes the section even when the hand-written part refers to what the
// document no longer has, and then fails naming those references.
func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("gen", flag.ContinueOnError)
	docPath := fs.String("openapi", "../../api/openapi.json", "the OpenAPI document")
	dtsPath := fs.String("dts", "gateway.d.ts", "the declarations whose generated section is rewritten")
	if err := fs.Parse(args); err != nil {
		return err
	}
	doc, err := os.ReadFile(*docPath)
	if err != nil {
		return err
	}
	dts, err := os.ReadFile(*dtsPath)
	if err != nil {
		return err
	}
	ds, err := declarations(doc)
	if err != nil {
		return fmt.Errorf("%s: %w", *docPath, err)
	}
	f, err := splitFile(string(dts))
	if err != nil {
		return fmt.Errorf("%s: %w", *dtsPath, err)
	}
	out := f.before + render(ds) + f.after
	if out == string(dts) {
		fmt.Fprintf(stdout, "%s is up to date with %s\n", *dtsPath, *docPath)
	} else {
		if err := os.WriteFile(*dtsPath, []byte(out), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %s from %s\n", *dtsPath, *docPath)
	}
	if problems := checkHandWritten(f.before+f.after, ds); len(problems) > 0 {
		var b bytes.Buffer
		for _, p := range problems {
			fmt.Fprintf(&b, "\n  %s", p)
		}
		return fmt.Errorf("%s: the hand-written types refer to what the document does not have:%s", *dtsPath, b.String())
	}
	return nil
}
