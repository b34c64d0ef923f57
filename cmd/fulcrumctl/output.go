package main

// One output flag for every command that prints data: -o/--output with the formats the
// command has (table, json, yaml; csv for exports and bench), the first the default.
// The older --json, and --format where a command had it, stay as aliases.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"
)

// outputFlag is a command's chosen output format.
type outputFlag struct {
	value   string
	asJSON  bool
	format  *string // the older --format, when the command has it
	allowed []string
	cmd     *cobra.Command
}

// addOutputFlag gives cmd -o/--output (shorthand only where -o is free) and --json.
func addOutputFlag(cmd *cobra.Command, allowed ...string) *outputFlag {
	o := &outputFlag{allowed: allowed, cmd: cmd}
	usage := "output format: " + orList(allowed)
	if cmd.Flags().ShorthandLookup("o") == nil {
		cmd.Flags().StringVarP(&o.value, "output", "o", allowed[0], usage)
	} else {
		cmd.Flags().StringVar(&o.value, "output", allowed[0], usage)
	}
	if slices.Contains(allowed, "json") {
		cmd.Flags().BoolVar(&o.asJSON, "json", false, "same as -o json")
	}
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(allowed, cobra.ShellCompDirectiveNoFileComp))
	// A bad -o fails before the command acts (budget set -o bogus changes nothing).
	if cmd.PreRunE == nil && cmd.PreRun == nil {
		cmd.PreRunE = func(*cobra.Command, []string) error {
			_, err := o.Format()
			return err
		}
	}
	return o
}

// withFormatAlias keeps the command's older --format (registered by the caller) as an
// alias of -o.
func (o *outputFlag) withFormatAlias(format *string) *outputFlag {
	o.format = format
	return o
}

// Format is the chosen format; flags that contradict each other are an error.
func (o *outputFlag) Format() (string, error) {
	f := o.cmd.Flags()
	got, name := o.value, "-o"
	var by []string
	if f.Changed("output") {
		by = append(by, "-o "+o.value)
	}
	if o.format != nil && f.Changed("format") {
		by = append(by, "--format "+*o.format)
		if !f.Changed("output") {
			got, name = *o.format, "--format"
		} else if *o.format != got {
			return "", fmt.Errorf("%s contradict: give one", strings.Join(by, " and "))
		}
	}
	if o.asJSON {
		by = append(by, "--json")
		if len(by) > 1 && got != "json" {
			return "", fmt.Errorf("%s contradict: give one", strings.Join(by, " and "))
		}
		got = "json"
	}
	if !slices.Contains(o.allowed, got) {
		return "", fmt.Errorf("%s %s: want %s", name, got, orList(o.allowed))
	}
	return got, nil
}

// Print prints v as JSON or YAML when one of them was chosen and reports whether it did;
// the command prints its table (or its own format) otherwise.
func (o *outputFlag) Print(w io.Writer, v any) (bool, error) {
	format, err := o.Format()
	if err != nil {
		return true, err
	}
	switch format {
	case "json":
		return true, printJSON(w, v)
	case "yaml":
		return true, printYAML(w, v)
	}
	return false, nil
}

// printYAML prints v as YAML with the JSON field names (the API's), by way of JSON so
// that the json tags (and omitempty) apply.
func printYAML(w io.Writer, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var node yaml.Node
	// yaml.v3 reads JSON (a YAML subset) into a node tree that keeps the field order.
	if err := yaml.Unmarshal(raw, &node); err != nil {
		return err
	}
	clearStyle(&node)
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&node); err != nil {
		return err
	}
	if err := enc.Close(); err != nil {
		return err
	}
	_, err = w.Write(b.Bytes())
	return err
}

// clearStyle drops the flow style (JSON's braces) so the YAML is in block style;
// strings keep their quotes where YAML needs them.
func clearStyle(n *yaml.Node) {
	if n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode {
		n.Style = 0
	}
	if n.Kind == yaml.ScalarNode && n.Style == yaml.DoubleQuotedStyle {
		n.Style = 0
	}
	for _, c := range n.Content {
		clearStyle(c)
	}
}

// orList is "a, b or c".
func orList(v []string) string {
	if len(v) < 2 {
		return strings.Join(v, "")
	}
	return strings.Join(v[:len(v)-1], ", ") + " or " + v[len(v)-1]
}
