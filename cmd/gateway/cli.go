package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"

	"github.com/alecthomas/kong"
	"github.com/mattn/go-isatty"

	"gateway/payments"
)

// Exit statuses; the root help and docs/cli.md document them.
const (
	exitError       = 1
	exitUsage       = 2
	exitNeedsReview = 3
	// exitDiscrepancies: the books found discrepancies (books reconcile).
	exitDiscrepancies = 4
)

// usageError is a mistake on the command line or in a GATEWAY_* variable.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// exitStatus ends the program with a chosen status after its output was written.
type exitStatus struct {
	code int
	msg  string
}

func (e exitStatus) Error() string { return e.msg }

func exitCode(err error) int {
	var (
		u usageError
		x exitStatus
	)
	switch {
	case err == nil:
		return 0
	case errors.As(err, &u):
		return exitUsage
	case errors.As(err, &x):
		return x.code
	}
	return exitError
}

// app is what every command reads and writes besides its flags.
type app struct {
	getenv         func(string) string
	stdin          io.Reader
	stdout, stderr io.Writer
	// terminal reports whether a stream is an interactive terminal: progress
	// is shown and confirmations are asked only there.
	terminal func(stream any) bool
}

// run is the whole program; main only wires the process to it, and tests call it.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	a := &app{getenv: getenv, stdin: os.Stdin, stdout: stdout, stderr: stderr, terminal: isTerminal}
	return a.run(ctx, args)
}

func isTerminal(stream any) bool {
	f, ok := stream.(*os.File)
	return ok && isatty.IsTerminal(f.Fd())
}

// exitRequest is how kong's exit (after --help) leaves the parser without
// leaving the process.
type exitRequest struct{ code int }

func (a *app) run(ctx context.Context, args []string) (err error) {
	if len(args) == 0 {
		help := *a
		help.stdout = a.stderr
		_ = help.run(ctx, []string{"--help"})
		return usageError{"no command given"}
	}
	defer func() {
		if r := recover(); r != nil {
			req, ok := r.(exitRequest)
			if !ok {
				panic(r)
			}
			if req.code != 0 {
				err = exitStatus{code: req.code, msg: "exit"}
			}
		}
	}()
	kctx, _, err := a.parse(ctx, args)
	if err != nil {
		return err
	}
	return kctx.Run()
}

// parse reads the command line and the variables into a fresh set of
// commands and validates them. It panics with an exitRequest after --help.
func (a *app) parse(ctx context.Context, args []string) (*kong.Context, *commandLine, error) {
	root := &commandLine{getenv: a.getenv}
	parser, err := a.parser(ctx, root)
	if err != nil {
		return nil, nil, err
	}
	kctx, err := parser.Parse(args)
	if err != nil {
		return nil, nil, usageError{usageMessage(err)}
	}
	return kctx, root, nil
}

// usageMessage says what was wrong and where to read more.
func usageMessage(err error) string {
	msg := err.Error()
	var pe *kong.ParseError
	if errors.As(err, &pe) && pe.Context != nil {
		cmd := "gateway"
		if sel := pe.Context.Selected(); sel != nil {
			cmd = sel.FullPath()
		}
		msg += fmt.Sprintf("\n(run %q for its flags and variables)", cmd+" --help")
	}
	return msg
}

// parser builds the command line over root.
func (a *app) parser(ctx context.Context, root *commandLine) (*kong.Kong, error) {
	k, err := kong.New(root,
		kong.Name("gateway"),
		kong.Description(rootHelp),
		kong.Writers(a.stdout, a.stderr),
		kong.Exit(func(code int) { panic(exitRequest{code}) }),
		kong.Resolvers(envResolver(a.getenv, &root.envErrs)),
		kong.ValueFormatter(helpValue),
		kong.Help(printHelp),
		kong.ConfigureHelp(kong.HelpOptions{WrapUpperBound: 100}),
		kong.ExplicitGroups(flagGroups),
		kong.BindTo(ctx, (*context.Context)(nil)),
		kong.Bind(a),
	)
	if err != nil {
		return nil, fmt.Errorf("command line: %w", err) // a bug in the tags, caught by the tests
	}
	detachEnvironment(k.Model.Node)
	return k, nil
}

const rootHelp = `An idempotent payment gateway: the HTTP API, its database schema, merchant and payment administration, and a one-command development mode.

Every flag of a command can also be set by the GATEWAY_* variable shown beside it (GATEWAY_FOO_BAR is --foo-bar); a flag wins over its variable. Secrets are read from variables only.

Exit status: 0 done; 1 error; 2 usage (a flag, argument or variable is wrong); 3 payments need a person (reconcile --once); 4 the books found discrepancies (books reconcile).`

var flagGroups = []kong.Group{
	{Key: "database", Title: "Database:"},
	{Key: "http", Title: "HTTP:"},
	{Key: "flow", Title: "Payment flow:"},
	{Key: "psp", Title: "Payment provider (PSP):"},
	{Key: "checkout", Title: "Two-step checkout and PSP notifications:"},
	{Key: "reconcile", Title: "Reconciler:"},
	{Key: "webhooks", Title: "Webhooks:"},
	{Key: "log", Title: "Logs:"},
}

// detachEnvironment keeps the variables' names for help and the resolver,
// and takes them from kong's own parsing, which would read the process's
// environment instead of getenv.
func detachEnvironment(n *kong.Node) {
	for _, f := range n.Flags {
		f.Tag.Envs = nil
	}
	for _, c := range n.Children {
		detachEnvironment(c)
	}
}

// envResolver gives each flag its variable's value when the command line
// does not set it. A value that does not parse is recorded with the
// variable's name and left at its default, so that Validate reports every
// problem at once.
func envResolver(getenv func(string) string, errs *[]error) kong.Resolver {
	return kong.ResolverFunc(func(_ *kong.Context, _ *kong.Path, flag *kong.Flag) (any, error) {
		for _, name := range flag.Envs {
			v := getenv(name)
			if v == "" {
				continue
			}
			scratch := reflect.New(flag.Target.Type()).Elem()
			if err := flag.Parse(kong.ScanFromTokens(kong.Token{Type: kong.FlagValueToken, Value: v}), scratch); err != nil {
				shown := v
				if isSecret(flag) {
					shown = "(secret)"
				}
				*errs = append(*errs, fmt.Errorf("%s=%s (%s) is invalid: %v", name, shown, "--"+flag.Name, parseReason(err)))
				return nil, nil
			}
			return v, nil
		}
		return nil, nil
	})
}

// parseReason drops kong's flag prefix from a parse error.
func parseReason(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, ": "); i >= 0 && strings.HasPrefix(msg, "--") {
		return msg[i+2:]
	}
	return msg
}

func isSecret(f *kong.Flag) bool { return f.Tag.Has("secret") }

// commandLine is every command. Its Validate runs the checks of the chosen
// command and of every group it embeds, after flags and variables are read.
type commandLine struct {
	Serve       serveCmd       `cmd:"" help:"Run the HTTP API, and the reconciler on its schedule."`
	Migrate     migrateCmd     `cmd:"" help:"Apply, revert, show or force the database schema version."`
	Merchants   merchantsCmd   `cmd:"" help:"Create and list merchants; create, list and revoke their API keys."`
	Payments    paymentsCmd    `cmd:"" help:"List and show payments; record an operator's decision on one in review."`
	Refunds     refundsCmd     `cmd:"" help:"List refunds; record an operator's decision on one in review."`
	PSPs        pspsCmd        `cmd:"" name:"psps" help:"The PSP accounts this configuration reaches: capabilities, routes and health."`
	Reconcile   reconcileCmd   `cmd:"" help:"Settle unfinished payments: a daemon, or one pass with a report (--once)."`
	Books       booksCmd       `cmd:"" help:"Reconcile the gateway's records against each PSP account's own ledger."`
	Webhooks    webhooksCmd    `cmd:"" help:"Merchants' webhook endpoints (create, list, delete, rotate, enable, disable, resend) and the dispatcher."`
	Dev         devCmd         `cmd:"" help:"What make run does: a private MariaDB, migrations, a demo merchant, the API."`
	Keys        logKeysCmd     `cmd:"" help:"What the logs call an idempotency key (keyed hashes)."`
	Healthcheck healthcheckCmd `cmd:"" help:"Exit 0 when the gateway at GATEWAY_ADDR is ready (for container healthchecks)."`
	Version     versionCmd     `cmd:"" help:"Print this build's version."`
	Help        helpCmd        `cmd:"" help:"Show the help of a command."`

	envErrs []error
	// getenv reads the variables a configuration names (a secret's "env:NAME").
	getenv func(string) string
}

// Validate reports every problem with the chosen command's configuration at once.
func (c *commandLine) Validate(kctx *kong.Context) error {
	errs := append([]error(nil), c.envErrs...)
	errs = append(errs, argProblems(kctx)...)
	for _, p := range kctx.Path {
		switch {
		case p.Command != nil:
			errs = append(errs, checks(p.Command.Target, c.getenv)...)
		case p.Flag != nil && !p.Resolved && isSecret(p.Flag):
			errs = append(errs, fmt.Errorf("--%s: pass secrets in %s, not on the command line (other users can read it in the process list)", p.Flag.Name, strings.Join(p.Flag.Envs, " or ")))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	lines := make([]string, len(errs))
	for i, err := range errs {
		lines[i] = "  " + err.Error()
	}
	return fmt.Errorf("invalid flags or variables:\n%s", strings.Join(lines, "\n"))
}

// argProblems refuses, before anything reaches the database (whose ASCII
// columns answer other text with a collation error rather than a miss),
// every flag or argument of the chosen command that cannot name what it
// names: one tagged id:"<prefix>" must be an id as the gateway makes them
// (the prefix and a ULID), one tagged ascii:"" visible ASCII (a key's
// visible prefix).
func argProblems(kctx *kong.Context) []error {
	var values []*kong.Value
	for _, f := range kctx.Flags() {
		values = append(values, f.Value)
	}
	if n := kctx.Selected(); n != nil {
		values = append(values, n.Positional...)
	}
	var errs []error
	for _, v := range values {
		if !v.Target.IsValid() || v.Target.Kind() != reflect.String || v.Target.String() == "" {
			continue
		}
		name, s := v.Name, v.Target.String()
		if v.Flag != nil {
			name = "--" + name
		}
		if prefix := v.Tag.Get("id"); prefix != "" && !payments.WellFormedID(prefix, s) {
			errs = append(errs, fmt.Errorf("%s %q cannot be an id: ids are %s and 26 characters of 0-9 and A-Z, as the gateway prints them (%s01M8SVRZDH8JWSTQVXXY9DNHZC)",
				name, s, prefix, prefix))
		}
		if v.Tag.Has("ascii") && !visibleASCII(s) {
			errs = append(errs, fmt.Errorf("%s %q is not visible ASCII, so it names nothing: copy it as the listing prints it", name, s))
		}
	}
	return errs
}

func visibleASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// envChecker is a group whose check reads variables it names itself.
type envChecker interface {
	checkEnv(getenv func(string) string) []error
}

// checks runs check() (and checkEnv) on v and on every group embedded in it.
func checks(v reflect.Value, getenv func(string) string) []error {
	if v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return nil
	}
	var errs []error
	if c, ok := v.Addr().Interface().(checker); ok {
		errs = append(errs, c.check()...)
	}
	if c, ok := v.Addr().Interface().(envChecker); ok {
		errs = append(errs, c.checkEnv(getenv)...)
	}
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if _, embedded := f.Tag.Lookup("embed"); (embedded || f.Anonymous) && f.IsExported() {
			errs = append(errs, checks(v.Field(i), getenv)...)
		}
	}
	return errs
}

// helpValue writes a flag's help with its variable and default.
func helpValue(v *kong.Value) string {
	var extra []string
	if v.Flag != nil {
		for _, e := range v.Flag.Envs {
			extra = append(extra, "$"+e)
		}
	}
	if v.HasDefault && v.Default != "" {
		extra = append(extra, "default "+v.Default)
	}
	if len(extra) == 0 {
		return v.Help
	}
	return v.Help + " (" + strings.Join(extra, ", ") + ")"
}

// printHelp is kong's help followed by the chosen command's secrets, which
// are variables only and so are not among its flags.
func printHelp(opts kong.HelpOptions, kctx *kong.Context) error {
	if err := kong.DefaultHelpPrinter(opts, kctx); err != nil {
		return err
	}
	node := kctx.Model.Node
	if sel := kctx.Selected(); sel != nil {
		node = sel
	}
	var secrets []*kong.Flag
	for _, group := range node.AllFlags(false) {
		for _, f := range group {
			if isSecret(f) {
				secrets = append(secrets, f)
			}
		}
	}
	if len(secrets) == 0 {
		return nil
	}
	fmt.Fprintln(kctx.Stdout, "\nSecrets (variables only, never flags):")
	for _, f := range secrets {
		fmt.Fprintf(kctx.Stdout, "  %s\n%s", strings.Join(f.Envs, ", "), wrap(f.Help, "      ", 80))
	}
	return nil
}

// wrap breaks text into indented lines of at most width characters.
func wrap(text, indent string, width int) string {
	var b strings.Builder
	line := indent
	for _, w := range strings.Fields(text) {
		if len(line) > len(indent) && len(line)+1+len(w) > width {
			b.WriteString(line + "\n")
			line = indent
		}
		if len(line) > len(indent) {
			line += " "
		}
		line += w
	}
	b.WriteString(line + "\n")
	return b.String()
}

// helpCmd is `gateway help [COMMAND…]`, the same as COMMAND --help.
type helpCmd struct {
	Command []string `arg:"" optional:"" help:"the command, e.g. payments resolve"`
}

func (c *helpCmd) Run(ctx context.Context, a *app) error {
	return a.run(ctx, append(append([]string(nil), c.Command...), "--help"))
}
