package mcpfence

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lease"
)

func callWith(meta mcp.Meta, header http.Header) *mcp.CallToolRequest {
	req := &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "t", Meta: meta}}
	if header != nil {
		req.Extra = &mcp.RequestExtra{Header: header}
	}
	return req
}

func TestFromMeta(t *testing.T) {
	src := FromMeta(MetaConversation)
	cases := []struct {
		name string
		v    any
		want string
		err  error
		says string
	}{
		{"string", "c1", "c1", nil, ""},
		{"missing", nil, "", ErrNoKey, ""},
		{"number", 42.0, "", ErrInvalidMeta, "got a number"},
		{"bool", true, "", ErrInvalidMeta, "got a boolean"},
		{"object", map[string]any{"id": "c"}, "", ErrInvalidMeta, "got an object"},
		{"array", []any{"c"}, "", ErrInvalidMeta, "got an array"},
		{"empty", "", "", ErrInvalidMeta, "empty"},
		{"longest", strings.Repeat("c", 256), strings.Repeat("c", 256), nil, ""},
		{"too long", strings.Repeat("c", 257), "", ErrInvalidMeta, "257 bytes"},
		{"bad utf-8", "c\xff", "", ErrInvalidMeta, "UTF-8"},
	}
	for _, c := range cases {
		meta := mcp.Meta{}
		if c.v != nil {
			meta[MetaConversation] = c.v
		}
		got, err := src(context.Background(), callWith(meta, nil))
		if got != c.want || !errors.Is(err, c.err) || (c.err == nil) != (err == nil) {
			t.Errorf("%s: got %q, %v; want %q, %v", c.name, got, err, c.want, c.err)
		}
		if c.says != "" && (err == nil || !strings.Contains(err.Error(), c.says) || !strings.Contains(err.Error(), MetaConversation)) {
			t.Errorf("%s: error %v does not name the field and say %q", c.name, err, c.says)
		}
	}
	if _, err := src(context.Background(), &mcp.CallToolRequest{}); !errors.Is(err, ErrNoKey) {
		t.Errorf("no params: %v", err)
	}
}

func TestFromHeader(t *testing.T) {
	src := FromHeader("fencekit-conversation")
	got, err := src(context.Background(), callWith(nil, http.Header{"Fencekit-Conversation": {"c1"}}))
	if got != "c1" || err != nil {
		t.Errorf("one value: %q, %v", got, err)
	}
	if _, err := src(context.Background(), callWith(nil, http.Header{"Fencekit-Conversation": {"a", "b"}})); !errors.Is(err, ErrInvalidMeta) {
		t.Errorf("two values: %v", err)
	}
	if _, err := src(context.Background(), callWith(nil, http.Header{})); !errors.Is(err, ErrNoKey) {
		t.Errorf("no header: %v", err)
	}
	if _, err := src(context.Background(), callWith(nil, nil)); !errors.Is(err, ErrNoKey) {
		t.Errorf("stdio (no Extra): %v", err)
	}
}

func TestFirstOf(t *testing.T) {
	src := FirstOf(FromHeader("Fencekit-Conversation"), FromMeta(MetaConversation))
	got, err := src(context.Background(), callWith(mcp.Meta{MetaConversation: "m"}, nil))
	if got != "m" || err != nil {
		t.Errorf("second source: %q, %v", got, err)
	}
	got, err = src(context.Background(), callWith(mcp.Meta{MetaConversation: "m"}, http.Header{"Fencekit-Conversation": {"h"}}))
	if got != "h" || err != nil {
		t.Errorf("first source wins: %q, %v", got, err)
	}
	// A malformed value stops the search: it is not replaced by a later source.
	if _, err := src(context.Background(), callWith(mcp.Meta{MetaConversation: "m"}, http.Header{"Fencekit-Conversation": {""}})); !errors.Is(err, ErrInvalidMeta) {
		t.Errorf("malformed first: %v", err)
	}
	if _, err := src(context.Background(), callWith(nil, nil)); !errors.Is(err, ErrNoKey) {
		t.Errorf("none: %v", err)
	}
}

func TestParseRun(t *testing.T) {
	id := uuid.New()
	h := id.String()
	cases := []struct {
		name string
		meta mcp.Meta
		want runMeta
		bad  bool
	}{
		{"none", mcp.Meta{}, runMeta{}, false},
		{"start", mcp.Meta{MetaRunStart: true}, runMeta{start: true}, false},
		{"start false", mcp.Meta{MetaRunStart: false}, runMeta{}, false},
		{"run", mcp.Meta{MetaRun: h}, runMeta{id: id}, false},
		{"run end", mcp.Meta{MetaRun: h, MetaRunEnd: true}, runMeta{id: id, end: true}, false},
		{"run end false", mcp.Meta{MetaRun: h, MetaRunEnd: false}, runMeta{id: id}, false},
		{"run a number", mcp.Meta{MetaRun: 1.0}, runMeta{}, true},
		{"run not a uuid", mcp.Meta{MetaRun: "r"}, runMeta{}, true},
		{"run nil uuid", mcp.Meta{MetaRun: uuid.Nil.String()}, runMeta{}, true},
		{"run too long", mcp.Meta{MetaRun: strings.Repeat("r", MaxRunIDLen+1)}, runMeta{}, true},
		{"end a string", mcp.Meta{MetaRun: h, MetaRunEnd: "true"}, runMeta{}, true},
		{"start a string", mcp.Meta{MetaRunStart: "true"}, runMeta{}, true},
		{"end without run", mcp.Meta{MetaRunEnd: true}, runMeta{}, true},
		{"start with run", mcp.Meta{MetaRunStart: true, MetaRun: h}, runMeta{}, true},
		{"start with end", mcp.Meta{MetaRunStart: true, MetaRunEnd: true}, runMeta{}, true},
	}
	for _, c := range cases {
		got, err := parseRun(callWith(c.meta, nil))
		if c.bad != (err != nil) || (!c.bad && got != c.want) {
			t.Errorf("%s: %+v, %v", c.name, got, err)
		}
		if c.bad && !errors.Is(err, ErrInvalidMeta) {
			t.Errorf("%s: %v does not match ErrInvalidMeta", c.name, err)
		}
	}
}

func TestNewValidates(t *testing.T) {
	m := &lease.Manager{}
	for name, cfg := range map[string]Config{
		"no Manager":                 {Account: Fixed("a")},
		"no Account":                 {Manager: m},
		"RunIdle above MaxParkIdle":  {Manager: m, Account: Fixed("a"), RunIdle: lease.MaxParkIdle + time.Second},
		"negative MaxWait":           {Manager: m, Account: Fixed("a"), MaxWait: -time.Second},
		"negative ProgressEvery":     {Manager: m, Account: Fixed("a"), ProgressEvery: -time.Second},
		"negative RunIdle":           {Manager: m, Account: Fixed("a"), RunIdle: -time.Second},
		"negative ReleaseTimeout":    {Manager: m, Account: Fixed("a"), ReleaseTimeout: -time.Nanosecond},
		"invalid policy in Tools":    {Manager: m, Account: Fixed("a"), Tools: map[string]Policy{"t": Policy(99)}},
		"invalid default policy":     {Manager: m, Account: Fixed("a"), Default: Policy(99)},
		"invalid RequestSchema":      {Manager: m, Account: Fixed("a"), RequestSchema: "Bad-Schema"},
		"RequestRetention too short": {Manager: m, Account: Fixed("a"), RequestRetention: MinRequestRetention - time.Second},
		"negative RequestRetention":  {Manager: m, Account: Fixed("a"), RequestRetention: -time.Hour},
	} {
		_, err := New(cfg)
		var ce *fence.ConfigError
		if !errors.Is(err, fence.ErrInvalidConfig) || !errors.As(err, &ce) || ce.Source != "mcpfence" {
			t.Errorf("%s: got %v, want a *fence.ConfigError from mcpfence", name, err)
		}
	}
	var r lease.Leaser = &lease.Manager{}
	if _, err := New(Config{Manager: r, Account: Fixed("a")}); err != nil {
		t.Errorf("zero durations take the defaults: %v", err)
	}
}
