// Command gpuq is the one binary of gpuq: the one-command development
// start (gpuq dev), the scheduler and worker daemons, and the commands
// people use every day to manage accounts, submit and follow jobs, and audit
// the ledger. Run `gpuq help` for the list, and `gpuq <command> --help` for
// each command's flags and examples.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/gpuq/gpuq/subjects"
)

// Exit codes, documented in `gpuq help`.
const (
	exitOK        = 0
	exitFailure   = 1 // the command failed; the message says why
	exitUsage     = 2 // bad flags or arguments
	exitJobFailed = 3 // submit --wait: the job ended failed or cancelled
	exitRejected  = 4 // the scheduler rejected the command (insufficient credits, …)
	exitAudit     = 5 // audit found the journal and the ledger disagree
)

// command is one subcommand.
type command struct {
	name    string
	summary string
	usage   string // the lines after "usage: gpuq "
	example string
	run     func(ctx context.Context, e *env, args []string) error
}

var commands []*command

func register(c *command) { commands = append(commands, c) }

// usageError is a mistake in how a command was called.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// exitError carries a specific exit code with its message; err is nil when
// the command has printed all there is to say.
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}
func (e exitError) Unwrap() error { return e.err }

// env is what every command gets: its output streams and the connection
// settings shared by all commands.
type env struct {
	stdout, stderr io.Writer
	conn           connFlags
	output         string // "table" or "json"
	// csv lets a command take --output csv as well (gpuq usage).
	csv bool
	// logFormat is a daemon's --log-format: "text" or "json".
	logFormat string
}

// daemons are the commands that run until stopped and log as they go:
// they take --log-format (and each its own --log-level).
var daemons = map[string]bool{"dev": true, "scheduler": true, "worker": true}

// offline are the commands that connect to nothing: they refuse the
// connection flags rather than ignore them.
var offline = map[string]bool{"version": true, "completion": true}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		if len(args) > 1 {
			if c := find(args[1]); c != nil {
				printCommandHelp(stdout, c, nil)
				return exitOK
			}
		}
		printHelp(stdout)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	if args[0] == "--version" {
		args = append([]string{"version"}, args[1:]...)
	}
	c := find(args[0])
	if c == nil {
		names := make([]string, len(commands))
		for i, c := range commands {
			names[i] = c.name
		}
		fmt.Fprintf(stderr, "gpuq: unknown command %q%s; run gpuq help for the list\n", args[0], didYouMean(args[0], names))
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	e := &env{stdout: stdout, stderr: stderr}
	err := c.run(ctx, e, args[1:])
	var ue usageError
	var ee exitError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "gpuq %s: %v\n", c.name, err)
		fmt.Fprintf(stderr, "run gpuq %s --help for usage\n", c.name)
		return exitUsage
	case errors.As(err, &ee):
		if ee.err != nil {
			fmt.Fprintf(stderr, "gpuq %s: %v\n", c.name, ee.err)
		}
		return ee.code
	default:
		fmt.Fprintf(stderr, "gpuq %s: %v\n", c.name, err)
		return exitFailure
	}
}

func find(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

func printHelp(w io.Writer) {
	fmt.Fprint(w, `gpuq is a GPU credit scheduler on NATS JetStream.

usage: gpuq <command> [flags] [arguments]

Commands:
`)
	sorted := append([]*command(nil), commands...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].name < sorted[j].name })
	for _, c := range sorted {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `
Start here: gpuq dev runs everything on this machine (embedded NATS, the
scheduler and a worker on simulated GPUs) and prints commands to try.

Every command takes --prefix, the installation's subject prefix. All but dev
(which runs its own server) connect with --nats URL (or $NATS_URL, default
nats://127.0.0.1:4222), --creds FILE (or $NATS_CREDS) or --nkey SEEDFILE (or
$NATS_NKEY), --inbox-prefix (or $NATS_INBOX_PREFIX; deploy/ gives each user
its own), --tls-ca, --tls-cert and --tls-key, or take them from a context
of the config file ($GPUQ_CONFIG, or ~/.config/gpuq/config) named with
--context NAME or $GPUQ_CONTEXT (see docs/cli.md). --output table|json and --timeout (how long to wait for the
scheduler's answer) are for the commands that ask gpuq something: the daemons
(dev, scheduler, worker) print no table or JSON, and of them only dev uses
--timeout; they log to stderr at --log-level (default info) in --log-format
text or json. gpuq status shows the installation at a glance. Run
gpuq <command> --help for its flags and examples.

Exit codes: 0 ok; 1 failure; 2 usage; 3 a job waited on with --wait ended
failed or cancelled; 4 the scheduler rejected the command; 5 audit found a
difference.
`)
}

func printCommandHelp(w io.Writer, c *command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "%s\n\nusage: gpuq %s\n", c.summary, strings.ReplaceAll(c.usage, "\n", "\n       gpuq "))
	if fs != nil {
		fmt.Fprint(w, "\nflags:\n")
		fs.SetOutput(w)
		fs.PrintDefaults()
	}
	if c.example != "" {
		fmt.Fprintf(w, "\nexamples:\n%s\n", c.example)
	}
}

// flags returns a flag set for c with the shared connection and output
// flags; parse it with parse.
func (e *env) flags(c *command) *flag.FlagSet {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	e.conn.register(fs)
	fs.StringVar(&e.output, "output", "table", "output format: table or json")
	if daemons[c.name] {
		fs.StringVar(&e.logFormat, "log-format", "text", "log format: text (key=value lines) or json (one JSON object a line)")
	}
	fs.Usage = func() {}
	return fs
}

// logger returns a daemon's logger on stderr at level (its --log-level),
// in its --log-format.
func (e *env) logger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usagef("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch e.logFormat {
	case "", "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, usagef("--log-format %q: want text or json", e.logFormat)
}

// parse parses args, flags and positional arguments in any order, and
// returns the positional ones; everything after "--" is positional. It
// prints c's help for --help.
func (e *env) parse(c *command, fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		// A negative number where a flag would be is an argument (account
		// grant NAME -500), which the flag package would take for a flag.
		n := negativeAt(fs, args)
		head, tail := args[:n], args[n:]
		if err := fs.Parse(head); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				printCommandHelp(e.stdout, c, fs)
				return nil, flag.ErrHelp
			}
			return nil, usageError{err.Error()}
		}
		rest := fs.Args()
		if consumed := len(head) - len(rest); len(rest) > 0 && consumed > 0 && head[consumed-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		if len(rest) > 0 {
			pos = append(pos, rest[0])
			args = append(slices.Clip(rest[1:]), tail...)
			continue
		}
		if len(tail) == 0 {
			break
		}
		pos = append(pos, tail[0])
		args = tail[1:]
	}
	if offline[c.name] {
		conn := append(slices.Sorted(maps.Keys(contextKeys)), "context")
		if err := onlyFlags(fs, "gpuq "+c.name+" connects to nothing and", conn, nil); err != nil {
			return nil, err
		}
	} else if err := e.conn.applyContext(fs); err != nil {
		return nil, err
	}
	// The daemons print no table or JSON, and only dev waits for an answer.
	if daemons[c.name] && flagSet(fs, "output") {
		return nil, usagef("gpuq %s prints no table or JSON and takes no --output; it logs to stderr in --log-format text or json", c.name)
	}
	if daemons[c.name] && c.name != "dev" && flagSet(fs, "timeout") {
		return nil, usagef("gpuq %s waits for no answer and takes no --timeout", c.name)
	}
	if e.csv && e.output == "csv" {
		return pos, nil
	}
	if e.output != "table" && e.output != "json" {
		if e.csv {
			return nil, usagef("--output %q: want table, json or csv", e.output)
		}
		return nil, usagef("--output %q: want table or json", e.output)
	}
	return pos, nil
}

// negativeAt returns the index of the first of args that is a negative
// integer standing where a flag would (not the value of the flag before
// it), or len(args) if there is none before the end or a "--".
func negativeAt(fs *flag.FlagSet, args []string) int {
	for i, a := range args {
		if a == "--" {
			return len(args)
		}
		if _, err := strconv.ParseInt(a, 10, 64); err == nil && strings.HasPrefix(a, "-") && !wantsValue(fs, args[:i]) {
			return i
		}
	}
	return len(args)
}

// wantsValue reports whether the last of before is a flag that takes the
// next argument as its value: a flag of fs that is not boolean, given
// without "=".
func wantsValue(fs *flag.FlagSet, before []string) bool {
	if len(before) == 0 {
		return false
	}
	last := before[len(before)-1]
	name := strings.TrimLeft(last, "-")
	if !strings.HasPrefix(last, "-") || name == "" || strings.Contains(name, "=") || len(last)-len(name) > 2 {
		return false
	}
	f := fs.Lookup(name)
	if f == nil {
		return false
	}
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return !ok || !b.IsBoolFlag()
}

// jobArg parses the flags of a command that takes one job id, and opens a
// session for it.
func (e *env) jobArg(c *command, fs *flag.FlagSet, args []string) (string, *session, error) {
	pos, err := e.parse(c, fs, args)
	if err != nil {
		return "", nil, err
	}
	if len(pos) != 1 {
		return "", nil, usagef("want one job id")
	}
	if err := subjects.CheckToken("job id", pos[0]); err != nil {
		return "", nil, usagef("%v", err)
	}
	s, err := e.session()
	if err != nil {
		return "", nil, err
	}
	return pos[0], s, nil
}

// noArgs parses the flags of a command that takes no arguments, and opens
// a session for it.
func (e *env) noArgs(c *command, fs *flag.FlagSet, args []string) (*session, error) {
	if err := e.parseNoArgs(c, fs, args); err != nil {
		return nil, err
	}
	return e.session()
}

// parseNoArgs parses the flags of a command that takes no arguments: a
// positional one is a usage error, not silently ignored.
func (e *env) parseNoArgs(c *command, fs *flag.FlagSet, args []string) error {
	pos, err := e.parse(c, fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	return nil
}

// flagSet reports whether the user gave the named flag, as opposed to
// leaving it at its default.
func flagSet(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			given = true
		}
	})
	return given
}

// onlyFlags returns a usage error naming each flag of own (a command's own
// flags) that the user gave although what they asked for, named by what,
// takes only those in takes: a flag that does not apply is refused, never
// silently ignored.
func onlyFlags(fs *flag.FlagSet, what string, own, takes []string) error {
	var bad []string
	for _, f := range own {
		if flagSet(fs, f) && !slices.Contains(takes, f) {
			bad = append(bad, "--"+f)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	if len(takes) == 0 {
		return usagef("%s takes none of %s", what, strings.Join(bad, ", "))
	}
	return usagef("%s does not take %s (it takes --%s)", what, strings.Join(bad, ", "), strings.Join(takes, ", --"))
}

// didYouMean returns ", did you mean X?" naming the closest of names to
// typed (by edit distance, at most a third of its length and never more
// than 2 edits, or a name typed starts), or "" if none is close.
func didYouMean(typed string, names []string) string {
	best, bestD := "", 0
	for _, n := range names {
		d := editDistance(typed, n)
		if len(typed) >= 3 && strings.HasPrefix(n, typed) {
			d = 1
		}
		if d <= min(2, max(1, len(typed)/3)) && (best == "" || d < bestD || d == bestD && n < best) {
			best, bestD = n, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(", did you mean %s?", best)
}

// editDistance is the edit distance between a and b, in bytes: insertions,
// deletions, substitutions and swaps of two neighbours (optimal string
// alignment), so "lsit" is one edit from "list".
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
