package demo

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
)

// ColorMode selects when the terminal timeline is coloured.
type ColorMode string

// Colour modes for --color.
const (
	ColorAuto   ColorMode = "auto"   // colour when writing to a terminal and NO_COLOR is unset or empty
	ColorAlways ColorMode = "always" // always colour
	ColorNever  ColorMode = "never"  // never colour
)

// ParseColorMode reads a --color value.
func ParseColorMode(s string) (ColorMode, error) {
	switch m := ColorMode(s); m {
	case ColorAuto, ColorAlways, ColorNever:
		return m, nil
	}
	return "", usagef("--color %q: want auto, always or never", s)
}

// UseColor decides whether to colour output written to w: never for
// ColorNever, always for ColorAlways, and for ColorAuto only when w is a
// terminal (a character device) and NO_COLOR is unset or empty
// (https://no-color.org).
func UseColor(mode ColorMode, w io.Writer, getenv func(string) string) bool {
	switch mode {
	case ColorAlways:
		return true
	case ColorNever:
		return false
	}
	if getenv("NO_COLOR") != "" {
		return false
	}
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

const (
	ansiReset  = "\x1b[0m"
	ansiBold   = "\x1b[1m"
	ansiDim    = "\x1b[2m"
	ansiRed    = "\x1b[31m"
	ansiGreen  = "\x1b[32m"
	ansiYellow = "\x1b[33m"
	ansiBlue   = "\x1b[34m"
	ansiPurple = "\x1b[35m"
	ansiCyan   = "\x1b[36m"
)

// TextPrinter writes one aligned line per event:
//
//	+1.234s  browser/B      token 42  write       ok      s3 reports/… accepted
//
// (offset, actor, token, kind, outcome, detail), coloured when Color is set.
type TextPrinter struct {
	W     io.Writer
	Color bool
}

// Print writes e as one line. Write errors are ignored (a closed terminal
// must not fail the scenario).
func (p TextPrinter) Print(e Event) {
	tok := "    -    "
	if e.Token != 0 {
		tok = fmt.Sprintf("token %-3d", e.Token)
	}
	line := fmt.Sprintf("%s  %s  %s  %s  %s  %s",
		p.paint(ansiDim, fmt.Sprintf("%+8.3fs", e.At.Seconds())),
		p.paint(actorColor(e.Actor), fmt.Sprintf("%-13s", e.Actor)),
		p.paint(ansiBold, tok),
		fmt.Sprintf("%-10s", e.Kind),
		p.paint(outcomeColor(e.Outcome), fmt.Sprintf("%-12s", e.Outcome)),
		e.Detail)
	_, _ = fmt.Fprintln(p.W, strings.TrimRight(line, " "))
}

func (p TextPrinter) paint(code, s string) string {
	if !p.Color || code == "" {
		return s
	}
	return code + s + ansiReset
}

func actorColor(a Actor) string {
	switch a {
	case ActorA, ActorC:
		return ansiCyan
	case ActorB, ActorD:
		return ansiPurple
	case ActorNet:
		return ansiYellow
	case ActorCheck:
		return ansiBlue
	}
	return ""
}

func outcomeColor(o Outcome) string {
	switch {
	case o == OK:
		return ansiGreen
	case o == Failed:
		return ansiRed + ansiBold
	case o == Stale, o == Unauthorized:
		return ansiRed
	case o.Refused():
		return ansiYellow
	}
	return ansiDim
}

// JSONPrinter writes one JSON object per event and line (JSON Lines).
type JSONPrinter struct {
	W io.Writer
}

// Print writes e as one JSON line.
func (p JSONPrinter) Print(e Event) {
	b, err := json.Marshal(e)
	if err != nil { // cannot happen for Event's field types
		b = []byte(fmt.Sprintf(`{"seq":%d,"error":%q}`, e.Seq, err.Error()))
	}
	_, _ = p.W.Write(append(b, '\n'))
}
