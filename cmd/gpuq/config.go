package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// A config file names contexts: the connection settings of an
// installation, so that --nats, --creds and the rest are not repeated on
// every command. It lives at $GPUQ_CONFIG, or else gpuq/config under the
// user's config directory (~/.config/gpuq/config), and reads:
//
//	# the context used when none is named
//	context = prod
//
//	[prod]
//	nats = tls://nats.example.com:4222
//	creds = ~/.nats/alice.creds
//	inbox-prefix = _INBOX_alice
//	tls-ca = ~/.nats/ca.pem
//
//	[dev]
//	nats = nats://127.0.0.1:4222
//
// A context's keys are the connection flags' names. A setting comes from,
// first to last: the flag on the command line; the context named by
// --context or $GPUQ_CONTEXT; $NATS_URL, $NATS_CREDS, $NATS_NKEY and
// $NATS_INBOX_PREFIX; the file's default context; the built-in default.

// contextKeys are the settings a context may hold, with the environment
// variable of each that has one.
var contextKeys = map[string]string{
	"nats": "NATS_URL", "creds": "NATS_CREDS", "nkey": "NATS_NKEY", "inbox-prefix": "NATS_INBOX_PREFIX",
	"tls-ca": "", "tls-cert": "", "tls-key": "", "prefix": "", "timeout": "",
}

// connKey reports whether name is a connection flag's.
func connKey(name string) bool {
	_, ok := contextKeys[name]
	return ok
}

// pathKeys are the settings that name a file: a leading ~/ is the home
// directory.
var pathKeys = map[string]bool{"creds": true, "nkey": true, "tls-ca": true, "tls-cert": true, "tls-key": true}

// config is a parsed config file.
type config struct {
	path     string
	current  string                       // the default context; "" if none
	contexts map[string]map[string]string // name → key → value
}

// configPath is where the config file is read from.
func configPath() (string, error) {
	if p := os.Getenv("GPUQ_CONFIG"); p != "" {
		return p, nil
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "gpuq", "config"), nil
}

// loadConfig reads the config file; a missing one is an empty config.
func loadConfig() (*config, error) {
	path, err := configPath()
	if err != nil {
		return &config{contexts: map[string]map[string]string{}}, nil // no home: no config
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &config{path: path, contexts: map[string]map[string]string{}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return parseConfig(path, data)
}

// parseConfig reads a config file's text: every mistake is an error with
// its line.
func parseConfig(path string, data []byte) (*config, error) {
	c := &config{path: path, contexts: map[string]map[string]string{}}
	var section map[string]string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		bad := func(format string, args ...any) error {
			return usagef("config %s, line %d: %s", path, n, fmt.Sprintf(format, args...))
		}
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
			continue
		case strings.HasPrefix(line, "["):
			name, ok := strings.CutSuffix(line[1:], "]")
			if name = strings.TrimSpace(name); !ok || name == "" || strings.ContainsAny(name, " \t[]") {
				return nil, bad("want [NAME], a context's name, got %q", line)
			}
			if c.contexts[name] != nil {
				return nil, bad("context %s is named twice", name)
			}
			section = map[string]string{}
			c.contexts[name] = section
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" {
			return nil, bad("want KEY = VALUE, got %q", line)
		}
		if section == nil {
			if k != "context" {
				return nil, bad("%q before the first [context]: only context = NAME, the default, goes there", k)
			}
			c.current = v
			continue
		}
		if _, known := contextKeys[k]; !known {
			return nil, bad("unknown key %q; a context takes %s", k, strings.Join(slices.Sorted(maps.Keys(contextKeys)), ", "))
		}
		if _, dup := section[k]; dup {
			return nil, bad("%s is set twice in one context", k)
		}
		section[k] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	if c.current != "" && c.contexts[c.current] == nil {
		return nil, usagef("config %s: the default context %q is not defined; it has %s", path, c.current, c.names())
	}
	return c, nil
}

func (c *config) names() string {
	if len(c.contexts) == 0 {
		return "none"
	}
	return strings.Join(slices.Sorted(maps.Keys(c.contexts)), ", ")
}

// applyContext sets the connection flags the command line left out from
// the config file's contexts, in the order the file's doc gives. It sets
// values without marking the flags given, so a context's timeout is no
// --timeout the command refuses.
func (f *connFlags) applyContext(fset *flag.FlagSet) error {
	named := f.context
	if named == "" {
		named = os.Getenv("GPUQ_CONTEXT")
	}
	cfg, err := loadConfig()
	if err != nil {
		return err
	}
	var explicit, fallback map[string]string
	if named != "" {
		explicit = cfg.contexts[named]
		if explicit == nil {
			if cfg.path == "" || len(cfg.contexts) == 0 {
				return usagef("context %q: the config file %s names no contexts", named, cfg.path)
			}
			return usagef("context %q is not in %s%s; it has %s", named, cfg.path,
				didYouMean(named, slices.Collect(maps.Keys(cfg.contexts))), cfg.names())
		}
	} else if cfg.current != "" {
		fallback = cfg.contexts[cfg.current]
	}
	for _, k := range slices.Sorted(maps.Keys(contextKeys)) {
		if flagSet(fset, k) {
			continue
		}
		v, ok := explicit[k]
		if !ok {
			if env := contextKeys[k]; env != "" && os.Getenv(env) != "" {
				continue // the flag's default is already the variable's
			}
			if v, ok = fallback[k]; !ok {
				continue
			}
		}
		if pathKeys[k] {
			v = expandHome(v)
		}
		if err := fset.Lookup(k).Value.Set(v); err != nil {
			return usagef("config %s: %s = %q: %v", cfg.path, k, v, err)
		}
	}
	return nil
}

// expandHome replaces a leading ~/ with the home directory.
func expandHome(p string) string {
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, rest)
		}
	}
	return p
}
