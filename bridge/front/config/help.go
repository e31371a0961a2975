package config

import (
	"fmt"
	"strings"
)

// helpWidth is where --help wraps its lines.
const helpWidth = 100

// Usage is the --help text of `prog` (`jaxport serve` or `jaxport-front`): every flag with
// its variable and default, from the one definition.
func Usage(prog string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "usage: %s --repository DIR|URL [--FLAG VALUE ...]\n\n", prog)
	b.WriteString(wrap("Serve exported JAX models over the Open Inference Protocol (KServe v2 / "+
		"Triton: gRPC, REST, metrics). Every flag is also the environment variable "+
		EnvPrefix+"<NAME> (--metrics-port: JAXPORT_METRICS_PORT); a flag wins over the variable, "+
		"the variable over the default. Flags are spelled out in full.", "") + "\n\n")
	for _, f := range flags {
		fmt.Fprintf(&b, "  --%s %s\n", f.name, f.metavar)
		b.WriteString(wrap(f.helpLine(), "      ") + "\n")
	}
	b.WriteString("  -h, --help\n      this text\n")
	return b.String()
}

// helpLine is a flag's help, its variable and its default.
func (f *flagDef) helpLine() string {
	line := f.help + "; env " + f.env()
	switch {
	case f.required:
		line += " (required)"
	case f.shown == "-":
	case f.shown != "":
		line += " (default: " + f.shown + ")"
	default:
		line += " (default: " + f.def + ")"
	}
	return line
}

// wrap breaks `text` into lines of at most helpWidth, each starting with `indent`.
func wrap(text, indent string) string {
	var lines []string
	line := indent
	for _, word := range strings.Fields(text) {
		if len(line) > len(indent) && len(line)+1+len(word) > helpWidth {
			lines = append(lines, line)
			line = indent
		}
		if len(line) > len(indent) {
			line += " "
		}
		line += word
	}
	return strings.Join(append(lines, line), "\n")
}

// MarkdownTable is the flag table of docs/bridge.md (between its `flags` markers), from the
// one definition; config's tests keep the document equal to it (`go test ./config -args
// -update-docs` rewrites it).
func MarkdownTable() string {
	var b strings.Builder
	b.WriteString("| Flag | Variable | Default | |\n|---|---|---|---|\n")
	for _, f := range flags {
		def := "`" + f.def + "`"
		switch {
		case f.required:
			def = "required"
		case f.shown == "-":
			def = "none"
		case f.shown != "":
			def = f.shown
		}
		name := "--" + f.name
		if f.metavar != "" {
			name += " " + f.metavar
		}
		help := strings.NewReplacer("|", `\|`, "<", "&lt;", ">", "&gt;").Replace(f.help)
		fmt.Fprintf(&b, "| `%s` | `%s` | %s | %s |\n", strings.ReplaceAll(name, "|", `\|`), f.env(), def, help)
	}
	return b.String()
}
