package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// clientSchemas are the schemas the client reads (a payment, a problem) or
// sends (a confirm's body). The schemas they refer to are generated with
// them, each once, after the first schema that uses it.
const clientSchemas = "Payment Problem ConfirmPaymentRequest"

// The lines around the generated section of gateway.d.ts.
const (
	beginLine = "// BEGIN generated from api/openapi.json by `go generate ./clients/js`: edit the document, not these lines."
	endLine   = "// END generated."
)

// width is where comments are wrapped.
const width = 100

// A decl is one generated declaration: an interface, whose members are its
// properties, or a type alias, whose members are the alternatives of a
// union of literals (none for any other alias). It is what the section is
// compared by, so that a difference names the schema and the property.
type decl struct {
	name string
	doc  []string // the comment's lines, as written
	head string   // "export interface Payment {", "export type PaymentStatus =" or a whole alias
	// members are an interface's properties or an alias's alternatives.
	members []member
}

type member struct {
	name string // the property, or the literal
	doc  []string
	line string // as written, without an alternative's closing ";"
}

func (d decl) isInterface() bool { return strings.HasPrefix(d.head, "export interface ") }

// schema is the part of a JSON Schema (OpenAPI 3.1) that the declarations
// mirror. Decoding is strict: a keyword not listed here stops the
// generator, rather than leaving a type wider or narrower than the
// document's.
type schema struct {
	Ref                  string          `json:"$ref"`
	Type                 typeList        `json:"type"`
	Enum                 []any           `json:"enum"`
	Items                *schema         `json:"items"`
	Properties           properties      `json:"properties"`
	Required             []string        `json:"required"`
	AdditionalProperties json.RawMessage `json:"additionalProperties"`
	Description          string          `json:"description"`

	// What a TypeScript type cannot say (formats, bounds, patterns, "not
	// both", examples): the gateway checks it, the declarations leave it out.
	Format    json.RawMessage `json:"format"`
	Pattern   json.RawMessage `json:"pattern"`
	Minimum   json.RawMessage `json:"minimum"`
	Maximum   json.RawMessage `json:"maximum"`
	MinLength json.RawMessage `json:"minLength"`
	MaxLength json.RawMessage `json:"maxLength"`
	MinItems  json.RawMessage `json:"minItems"`
	Not       json.RawMessage `json:"not"`
	Examples  json.RawMessage `json:"examples"`
}

// typeList is "type": one name or a list of them (["string", "null"]).
type typeList []string

func (t *typeList) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*t = typeList{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return fmt.Errorf("type: %w", err)
	}
	*t = many
	return nil
}

type property struct {
	name   string
	schema *schema
}

// properties keep the document's order, which the declarations follow.
type properties []property

func (ps *properties) UnmarshalJSON(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return errors.New("properties is not an object")
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		name := t.(string)
		var s schema
		if err := dec.Decode(&s); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		*ps = append(*ps, property{name, &s})
	}
	_, err := dec.Token()
	return err
}

func decodeSchema(raw []byte) (*schema, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var s schema
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("%w (a keyword the generator does not turn into a type: teach it, in clients/js/gen)", err)
	}
	return &s, nil
}

// declarations are the generated declarations for clientSchemas, from the
// OpenAPI document.
func declarations(doc []byte) ([]decl, error) {
	var d struct {
		Components struct {
			Schemas map[string]json.RawMessage `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, err
	}
	g := &generator{schemas: d.Components.Schemas, seen: map[string]bool{}}
	for _, name := range strings.Fields(clientSchemas) {
		if err := g.add(name); err != nil {
			return nil, err
		}
	}
	return g.decls, nil
}

type generator struct {
	schemas map[string]json.RawMessage
	seen    map[string]bool
	decls   []decl
}

// add declares the schema, then the schemas it refers to.
func (g *generator) add(name string) error {
	if g.seen[name] {
		return nil
	}
	g.seen[name] = true
	raw, ok := g.schemas[name]
	if !ok {
		return fmt.Errorf("no schema %s in components/schemas", name)
	}
	s, err := decodeSchema(raw)
	if err != nil {
		return fmt.Errorf("schema %s: %w", name, err)
	}
	var refs []string
	d, err := declare(name, s, &refs)
	if err != nil {
		return fmt.Errorf("schema %s: %w", name, err)
	}
	g.decls = append(g.decls, d)
	for _, r := range refs {
		if err := g.add(r); err != nil {
			return err
		}
	}
	return nil
}

func declare(name string, s *schema, refs *[]string) (decl, error) {
	d := decl{name: name, doc: comment("", s.Description)}
	if len(s.Enum) > 1 {
		// One value a line, so that a difference names the value.
		d.head = "export type " + name + " ="
		for _, v := range s.Enum {
			l, err := literal(v)
			if err != nil {
				return decl{}, err
			}
			d.members = append(d.members, member{name: l, line: "  | " + l})
		}
		return d, nil
	}
	if len(s.Properties) == 0 {
		t, err := tsType(s, refs)
		if err != nil {
			return decl{}, err
		}
		d.head = "export type " + name + " = " + t + ";"
		return d, nil
	}
	if !s.Type.is("object") {
		return decl{}, errors.New("properties on a schema that is not an object")
	}
	if string(s.AdditionalProperties) != "false" {
		return decl{}, errors.New(`an object with properties needs "additionalProperties": false to be declared exactly`)
	}
	required := map[string]bool{}
	for _, r := range s.Required {
		required[r] = true
	}
	d.head = "export interface " + name + " {"
	for _, p := range s.Properties {
		t, err := tsType(p.schema, refs)
		if err != nil {
			return decl{}, fmt.Errorf("%s: %w", p.name, err)
		}
		opt := "?"
		if required[p.name] {
			opt = ""
			delete(required, p.name)
		}
		d.members = append(d.members, member{
			name: p.name,
			doc:  comment("  ", p.schema.Description),
			line: "  " + propertyName(p.name) + opt + ": " + t + ";",
		})
	}
	if len(required) > 0 {
		missing := make([]string, 0, len(required))
		for r := range required {
			missing = append(missing, r)
		}
		sort.Strings(missing)
		return decl{}, fmt.Errorf("required names %s, which are not among its properties", strings.Join(missing, ", "))
	}
	return d, nil
}

func (t typeList) is(name string) bool { return len(t) == 1 && t[0] == name }

// tsType is the TypeScript type of a schema used in place: a referenced
// schema by its name (added to refs), literals for an enum, a map for an
// object without properties.
func tsType(s *schema, refs *[]string) (string, error) {
	if s.Ref != "" {
		name, ok := strings.CutPrefix(s.Ref, "#/components/schemas/")
		if !ok {
			return "", fmt.Errorf("$ref %s is not a schema of components/schemas", s.Ref)
		}
		*refs = append(*refs, name)
		return name, nil
	}
	if len(s.Enum) > 0 {
		lits := make([]string, len(s.Enum))
		for i, v := range s.Enum {
			l, err := literal(v)
			if err != nil {
				return "", err
			}
			lits[i] = l
		}
		return strings.Join(lits, " | "), nil
	}
	if len(s.Type) == 0 {
		return "", errors.New("no type, $ref or enum")
	}
	alts := make([]string, 0, len(s.Type))
	for _, t := range s.Type {
		switch t {
		case "string", "number", "boolean", "null":
			alts = append(alts, t)
		case "integer":
			alts = append(alts, "number")
		case "array":
			if s.Items == nil {
				return "", errors.New("an array without items")
			}
			it, err := tsType(s.Items, refs)
			if err != nil {
				return "", fmt.Errorf("items: %w", err)
			}
			if strings.Contains(it, " | ") {
				it = "(" + it + ")"
			}
			alts = append(alts, it+"[]")
		case "object":
			if len(s.Properties) > 0 {
				return "", errors.New("an object with properties in place: make it a schema of its own")
			}
			v := "unknown"
			if ap := s.AdditionalProperties; len(ap) > 0 && ap[0] == '{' {
				as, err := decodeSchema(ap)
				if err != nil {
					return "", fmt.Errorf("additionalProperties: %w", err)
				}
				if v, err = tsType(as, refs); err != nil {
					return "", fmt.Errorf("additionalProperties: %w", err)
				}
			}
			alts = append(alts, "Record<string, "+v+">")
		default:
			return "", fmt.Errorf("type %q", t)
		}
	}
	return strings.Join(alts, " | "), nil
}

func literal(v any) (string, error) {
	switch v := v.(type) {
	case string:
		return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'", nil
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64), nil
	case bool:
		return strconv.FormatBool(v), nil
	case nil:
		return "null", nil
	}
	return "", fmt.Errorf("enum value %v", v)
}

var identifier = regexp.MustCompile(`^[A-Za-z_$][A-Za-z0-9_$]*$`)

func propertyName(name string) string {
	if identifier.MatchString(name) {
		return name
	}
	l, _ := literal(name)
	return l
}

// comment is a description as a JSDoc comment indented by indent: one line
// when it fits, else wrapped at width, a list item's lines under its text.
func comment(indent, text string) []string {
	text = strings.TrimSpace(strings.ReplaceAll(text, "*/", `*\/`))
	if text == "" {
		return nil
	}
	if one := indent + "/** " + text + " */"; !strings.Contains(text, "\n") && utf8.RuneCountInString(one) <= width {
		return []string{one}
	}
	lines := []string{indent + "/**"}
	for _, para := range strings.Split(text, "\n") {
		if strings.TrimSpace(para) == "" {
			lines = append(lines, indent+" *")
			continue
		}
		hang := ""
		if strings.HasPrefix(para, "- ") {
			hang = "  "
		}
		line := indent + " *"
		for i, w := range strings.Fields(para) {
			if i > 0 && utf8.RuneCountInString(line)+1+utf8.RuneCountInString(w) > width {
				lines = append(lines, line)
				line = indent + " * " + hang + w
				continue
			}
			line += " " + w
		}
		lines = append(lines, line)
	}
	return append(lines, indent+" */")
}

// render is the generated section, from its BEGIN line to its END line.
func render(ds []decl) string {
	var b strings.Builder
	b.WriteString(beginLine + "\n")
	for _, d := range ds {
		b.WriteString("\n")
		writeLines(&b, d.doc)
		b.WriteString(d.head + "\n")
		for i, m := range d.members {
			writeLines(&b, m.doc)
			b.WriteString(m.line)
			if !d.isInterface() && i == len(d.members)-1 {
				b.WriteString(";")
			}
			b.WriteString("\n")
		}
		if d.isInterface() {
			b.WriteString("}\n")
		}
	}
	b.WriteString("\n" + endLine + "\n")
	return b.String()
}

func writeLines(b *strings.Builder, lines []string) {
	for _, l := range lines {
		b.WriteString(l + "\n")
	}
}

// A dtsFile is gateway.d.ts cut around its generated section.
type dtsFile struct {
	before, section, after string
}

func splitFile(text string) (dtsFile, error) {
	i := strings.Index(text, beginLine+"\n")
	if i < 0 || (i > 0 && text[i-1] != '\n') {
		return dtsFile{}, fmt.Errorf("no generated section: its first line must be %q", beginLine)
	}
	j := strings.Index(text[i:], "\n"+endLine+"\n")
	if j < 0 {
		return dtsFile{}, fmt.Errorf("the generated section has no end: its last line must be %q", endLine)
	}
	end := i + j + len("\n"+endLine+"\n")
	return dtsFile{before: text[:i], section: text[i:end], after: text[end:]}, nil
}

var (
	interfaceHead = regexp.MustCompile(`^export interface (\w+) \{$`)
	aliasHead     = regexp.MustCompile(`^export type (\w+) =( .*;)?$`)
	// A property, or an index signature ("[field: string]: unknown;").
	propertyLine = regexp.MustCompile(`^  ('(?:[^'\\]|\\.)*'|[A-Za-z_$][\w$]*|\[\w+: \w+\])\??: .+;$`)
	alternative  = regexp.MustCompile(`^  \| (.+?)(;?)$`)
)

// parse reads a generated section back into declarations: the layout
// render writes, and what hand edits leave of it (blank lines, a comment
// whose property was deleted), which the text's comparison still catches.
func parse(section string) ([]decl, error) {
	lines := strings.Split(strings.TrimSuffix(section, "\n"), "\n")
	if len(lines) < 2 || lines[0] != beginLine || lines[len(lines)-1] != endLine {
		return nil, errors.New("the section does not open with its BEGIN line and close with its END line")
	}
	lines = lines[1 : len(lines)-1]
	var ds []decl
	var doc []string
	bad := func(in string, i int) error {
		return fmt.Errorf("%sline %d of the section is not as the generator writes it: %q", in, i+2, lines[i])
	}
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		switch {
		case l == "":
		case strings.HasPrefix(l, "/**"):
			var err error
			if doc, i, err = readComment(lines, i, ""); err != nil {
				return nil, err
			}
		case interfaceHead.MatchString(l):
			d := decl{name: interfaceHead.FindStringSubmatch(l)[1], doc: doc, head: l}
			doc = nil
			var mdoc []string
			for i++; ; i++ {
				if i == len(lines) {
					return nil, fmt.Errorf("interface %s does not end", d.name)
				}
				l := lines[i]
				if l == "}" {
					break
				}
				if l == "" {
					continue
				}
				if strings.HasPrefix(l, "  /**") {
					var err error
					if mdoc, i, err = readComment(lines, i, "  "); err != nil {
						return nil, err
					}
					continue
				}
				m := propertyLine.FindStringSubmatch(l)
				if m == nil {
					return nil, bad(d.name+": ", i)
				}
				name := m[1]
				if strings.HasPrefix(name, "'") {
					name = strings.NewReplacer(`\'`, `'`, `\\`, `\`).Replace(name[1 : len(name)-1])
				}
				d.members = append(d.members, member{name: name, doc: mdoc, line: l})
				mdoc = nil
			}
			ds = append(ds, d)
		case aliasHead.MatchString(l):
			m := aliasHead.FindStringSubmatch(l)
			d := decl{name: m[1], doc: doc, head: l}
			doc = nil
			if m[2] == "" {
				for i++; ; i++ {
					if i == len(lines) {
						return nil, fmt.Errorf("type %s does not end", d.name)
					}
					if lines[i] == "" {
						continue
					}
					a := alternative.FindStringSubmatch(lines[i])
					if a == nil {
						return nil, bad(d.name+": ", i)
					}
					d.members = append(d.members, member{name: a[1], line: "  | " + a[1]})
					if a[2] == ";" {
						break
					}
				}
			}
			ds = append(ds, d)
		default:
			return nil, bad("", i)
		}
	}
	return ds, nil
}

// readComment reads the comment starting at lines[i], returning it and the
// index of its last line.
func readComment(lines []string, i int, indent string) ([]string, int, error) {
	for j := i; j < len(lines); j++ {
		if !strings.HasPrefix(lines[j], indent) {
			break
		}
		if strings.HasSuffix(lines[j], "*/") {
			return append([]string(nil), lines[i:j+1]...), j, nil
		}
	}
	return nil, 0, fmt.Errorf("the comment at line %d of the section does not end", i+2)
}

// drift lists how the declarations in gateway.d.ts (have) differ from the
// ones the document gives (want), one line per schema or property. Order
// and layout are not compared: the file's text is.
func drift(want, have []decl) []string {
	var out []string
	haveByName := map[string]decl{}
	for _, d := range have {
		haveByName[d.name] = d
	}
	wantByName := map[string]bool{}
	for _, w := range want {
		wantByName[w.name] = true
		h, ok := haveByName[w.name]
		if !ok {
			out = append(out, fmt.Sprintf("%s: a schema of api/openapi.json the client uses, missing from gateway.d.ts", w.name))
			continue
		}
		if h.head != w.head {
			out = append(out, fmt.Sprintf("%s: gateway.d.ts declares `%s`, api/openapi.json gives `%s`", w.name, h.head, w.head))
		}
		if !equalLines(h.doc, w.doc) {
			out = append(out, fmt.Sprintf("%s: its comment is not the schema's description", w.name))
		}
		out = append(out, memberDrift(w, h)...)
	}
	for _, h := range have {
		if !wantByName[h.name] {
			out = append(out, fmt.Sprintf("%s: in gateway.d.ts's generated section, not a schema the client uses in api/openapi.json", h.name))
		}
	}
	return out
}

func memberDrift(w, h decl) []string {
	var out []string
	label := func(m member) string {
		if w.isInterface() {
			return w.name + "." + m.name
		}
		return w.name + " " + m.name
	}
	what := "property"
	if !w.isInterface() {
		what = "value"
	}
	hm := map[string]member{}
	for _, m := range h.members {
		hm[m.name] = m
	}
	wm := map[string]bool{}
	for _, m := range w.members {
		wm[m.name] = true
		g, ok := hm[m.name]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s: a %s in api/openapi.json, missing from gateway.d.ts (want `%s`)", label(m), what, strings.TrimSpace(m.line)))
		case g.line != m.line:
			out = append(out, fmt.Sprintf("%s: gateway.d.ts declares `%s`, api/openapi.json gives `%s`", label(m), strings.TrimSpace(g.line), strings.TrimSpace(m.line)))
		case !equalLines(g.doc, m.doc):
			out = append(out, fmt.Sprintf("%s: its comment is not the property's description", label(m)))
		}
	}
	for _, m := range h.members {
		if !wm[m.name] {
			out = append(out, fmt.Sprintf("%s: in gateway.d.ts, not a %s in api/openapi.json", label(m), what))
		}
	}
	return out
}

func equalLines(a, b []string) bool {
	return strings.Join(a, "\n") == strings.Join(b, "\n")
}

var (
	indexedAccess = regexp.MustCompile(`\b([A-Z]\w*)\['([^']*)'\]`)
	declaredName  = regexp.MustCompile(`(?m)^export (?:declare )?(?:interface|type|class|const|function) (\w+)`)
)

// checkHandWritten lists what the hand-written part of gateway.d.ts says of
// the generated declarations that is not so: a property it names
// (ConfirmPaymentRequest['order_id']) that the schema does not have, or a
// generated name declared again by hand. tsc would say as much; this needs
// only Go.
func checkHandWritten(text string, ds []decl) []string {
	byName := map[string]decl{}
	for _, d := range ds {
		byName[d.name] = d
	}
	var out []string
	for _, m := range indexedAccess.FindAllStringSubmatch(text, -1) {
		d, ok := byName[m[1]]
		if !ok {
			continue
		}
		found := false
		for _, p := range d.members {
			found = found || (d.isInterface() && p.name == m[2])
		}
		if !found {
			out = append(out, fmt.Sprintf("%s: %s has no property %s in api/openapi.json", m[0], m[1], m[2]))
		}
	}
	for _, m := range declaredName.FindAllStringSubmatch(text, -1) {
		if _, ok := byName[m[1]]; ok {
			out = append(out, fmt.Sprintf("%s: declared by hand, and generated from api/openapi.json", m[1]))
		}
	}
	return out
}
