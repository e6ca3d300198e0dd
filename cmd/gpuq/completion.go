package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"regexp"
	"slices"
	"sort"
	"strings"
)

func init() {
	register(&command{
		name:    "completion",
		summary: "print a shell completion script: bash, zsh or fish",
		usage:   "completion bash|zsh|fish",
		example: `  source <(gpuq completion bash)                 # in ~/.bashrc
  source <(gpuq completion zsh)                  # in ~/.zshrc
  gpuq completion fish > ~/.config/fish/completions/gpuq.fish
  # it completes commands, account and prices subcommands, and each command's flags`,
		run: runCompletion,
	})
}

// subcommands are the words a command takes first, for completion.
var subcommands = map[string][]string{
	"account":    {"create", "grant", "limits", "refill", "weight", "show", "list"},
	"prices":     {"set", "show"},
	"completion": {"bash", "zsh", "fish"},
}

// flagLine is a flag as flag.PrintDefaults writes it: "  -name ...".
var flagLine = regexp.MustCompile(`(?m)^  -([a-z][a-z0-9-]*)`)

// commandFlags returns the flags c takes, read from its --help (which
// parses nothing else and connects to nothing).
func commandFlags(c *command) []string {
	var buf bytes.Buffer
	_ = c.run(context.Background(), &env{stdout: &buf, stderr: io.Discard}, []string{"--help"}) // flag.ErrHelp, with the help on buf
	var out []string
	for _, m := range flagLine.FindAllStringSubmatch(buf.String(), -1) {
		switch name := m[1]; {
		case (daemons[c.name] || c.name == "completion") && name == "output", daemons[c.name] && c.name != "dev" && name == "timeout",
			offline[c.name] && (name == "context" || connKey(name)):
			// registered for every command, refused by these (env.parse)
		case len(name) == 1:
			out = append(out, "-"+name)
		default:
			out = append(out, "--"+name)
		}
	}
	return out
}

// completionWords is, for each command name, the words to complete after
// it: its subcommands, then its flags.
func completionWords() (names []string, words map[string][]string, flags map[string][]string) {
	words, flags = map[string][]string{}, map[string][]string{}
	for _, c := range commands {
		names = append(names, c.name)
		words[c.name] = subcommands[c.name]
		flags[c.name] = commandFlags(c)
	}
	sort.Strings(names)
	words["help"] = names
	return append(names, "help"), words, flags
}

func runCompletion(_ context.Context, e *env, args []string) error {
	c := find("completion")
	fs := e.flags(c)
	pos, err := e.parse(c, fs, args)
	if err != nil {
		return err
	}
	if flagSet(fs, "output") {
		return usagef("completion prints a shell script and takes no --output")
	}
	if len(pos) != 1 || !slices.Contains(subcommands["completion"], pos[0]) {
		return usagef("want bash, zsh or fish")
	}
	names, words, flags := completionWords()
	switch pos[0] {
	case "bash":
		fmt.Fprint(e.stdout, bashCompletion(names, words, flags))
	case "zsh":
		fmt.Fprint(e.stdout, "#compdef gpuq\n# gpuq completion zsh: bash's, through zsh's bashcompinit\nautoload -U +X bashcompinit && bashcompinit\n"+bashCompletion(names, words, flags))
	case "fish":
		fmt.Fprint(e.stdout, fishCompletion(names, words, flags))
	}
	return nil
}

func bashCompletion(names []string, words, flags map[string][]string) string {
	var b strings.Builder
	b.WriteString("# gpuq completion bash: source <(gpuq completion bash)\n_gpuq() {\n")
	b.WriteString("\tlocal cur=${COMP_WORDS[COMP_CWORD]} cmd=${COMP_WORDS[1]} list=\n")
	fmt.Fprintf(&b, "\tif [[ $COMP_CWORD -eq 1 ]]; then\n\t\tlist=%q\n", strings.Join(names, " "))
	b.WriteString("\telif [[ $cur == -* ]]; then\n\t\tcase $cmd in\n")
	for _, n := range names {
		if len(flags[n]) > 0 {
			fmt.Fprintf(&b, "\t\t%s) list=%q ;;\n", n, strings.Join(flags[n], " "))
		}
	}
	b.WriteString("\t\tesac\n\telif [[ $COMP_CWORD -eq 2 ]]; then\n\t\tcase $cmd in\n")
	for _, n := range names {
		if len(words[n]) > 0 {
			fmt.Fprintf(&b, "\t\t%s) list=%q ;;\n", n, strings.Join(words[n], " "))
		}
	}
	b.WriteString("\t\tesac\n\tfi\n\tCOMPREPLY=($(compgen -W \"$list\" -- \"$cur\"))\n}\ncomplete -o default -F _gpuq gpuq\n")
	return b.String()
}

func fishCompletion(names []string, words, flags map[string][]string) string {
	var b strings.Builder
	b.WriteString("# gpuq completion fish: gpuq completion fish > ~/.config/fish/completions/gpuq.fish\ncomplete -c gpuq -f\n")
	for _, n := range names {
		summary := "the commands, or one's help"
		if c := find(n); c != nil {
			summary = c.summary
		}
		fmt.Fprintf(&b, "complete -c gpuq -n __fish_use_subcommand -a %s -d %s\n", n, fishQuote(summary))
		if ws := words[n]; len(ws) > 0 {
			fmt.Fprintf(&b, "complete -c gpuq -n '__fish_seen_subcommand_from %s' -a %s\n", n, fishQuote(strings.Join(ws, " ")))
		}
		for _, f := range flags[n] {
			fmt.Fprintf(&b, "complete -c gpuq -n '__fish_seen_subcommand_from %s' -l %s\n", n, strings.TrimPrefix(f, "--"))
		}
	}
	return b.String()
}

// fishQuote quotes s for fish: single quotes, with \ and ' escaped.
func fishQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}
