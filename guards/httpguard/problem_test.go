package httpguard_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/httpguard"
)

func response(status int, ct, body string) *http.Response {
	h := http.Header{}
	if ct != "" {
		h.Set("Content-Type", ct)
	}
	return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader(body))}
}

const staleOK = `{"type":"` + httpguard.TypeStaleToken + `","title":"Stale fencing token","status":409,"resource":"r","presented_token":"7","highest_token":"8"}`

func TestErrorFromResponse(t *testing.T) {
	pj := httpguard.ProblemContentType
	assert.NoError(t, httpguard.ErrorFromResponse(response(200, "", "")))
	assert.NoError(t, httpguard.ErrorFromResponse(response(302, "", "")))

	err := httpguard.ErrorFromResponse(response(409, pj, staleOK))
	se, ok := fence.IsStale(err)
	require.True(t, ok, "%v", err)
	assert.Equal(t, fence.StaleError{Resource: "r", Presented: 7, Highest: 8}, *se)

	err = httpguard.ErrorFromResponse(response(409, pj+"; charset=utf-8",
		`{"type":"`+httpguard.TypeStaleToken+`","title":"t","status":409,"resource":"r","presented_token":"7","highest_token":"8","extension":{"x":[1]}}`))
	_, ok = fence.IsStale(err)
	assert.True(t, ok, "parameters and extension members are fine: %v", err)

	err = httpguard.ErrorFromResponse(response(404, pj, `{"type":"about:blank","title":"Not Found","status":404}`))
	var pe *httpguard.ProblemError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, "Not Found", pe.Problem.Title)
	assert.Nil(t, pe.Unwrap())

	stale := func(presented, highest string) string {
		return `{"type":"` + httpguard.TypeStaleToken + `","title":"t","status":409,"resource":"r","presented_token":` + presented + `,"highest_token":` + highest + `}`
	}
	for name, tc := range map[string]struct {
		status   int
		ct, body string
	}{
		"text/plain":              {409, "text/plain", staleOK},
		"no content type":         {409, "", staleOK},
		"application/json":        {409, "application/json", staleOK},
		"bad media type":          {409, "application/problem+json; ;", staleOK},
		"empty body":              {409, pj, ""},
		"not JSON":                {409, pj, "stale!"},
		"JSON array":              {409, pj, `[` + staleOK + `]`},
		"JSON string":             {409, pj, `"stale"`},
		"truncated":               {409, pj, staleOK[:len(staleOK)-1]},
		"trailing data":           {409, pj, staleOK + `{}`},
		"trailing garbage":        {409, pj, staleOK + `x`},
		"duplicate member":        {409, pj, strings.Replace(staleOK, `"status":409`, `"status":409,"status":409`, 1)},
		"duplicate token":         {409, pj, strings.Replace(staleOK, `"highest_token":"8"`, `"highest_token":"8","highest_token":"9"`, 1)},
		"status mismatch":         {409, pj, strings.Replace(staleOK, `"status":409`, `"status":400`, 1)},
		"status string":           {409, pj, strings.Replace(staleOK, `"status":409`, `"status":"409"`, 1)},
		"status float":            {409, pj, strings.Replace(staleOK, `"status":409`, `"status":409.5`, 1)},
		"status negative":         {409, pj, strings.Replace(staleOK, `"status":409`, `"status":-409`, 1)},
		"status missing":          {409, pj, strings.Replace(staleOK, `"status":409,`, ``, 1)},
		"type missing":            {409, pj, `{"title":"t","status":409}`},
		"type number":             {409, pj, `{"type":1,"title":"t","status":409}`},
		"title null":              {409, pj, `{"type":"x","title":null,"status":409}`},
		"tokens as numbers":       {409, pj, stale(`7`, `8`)},
		"token zero":              {409, pj, stale(`"0"`, `"8"`)},
		"token negative":          {409, pj, stale(`"-7"`, `"8"`)},
		"token leading zero":      {409, pj, stale(`"07"`, `"8"`)},
		"token overflow":          {409, pj, stale(`"7"`, `"9223372036854775808"`)},
		"token spaces":            {409, pj, stale(`" 7"`, `"8"`)},
		"token missing":           {409, pj, stale(`"7"`, `""`)},
		"highest not higher":      {409, pj, stale(`"8"`, `"8"`)},
		"highest lower":           {409, pj, stale(`"9"`, `"8"`)},
		"resource invalid":        {409, pj, strings.Replace(staleOK, `"resource":"r"`, `"resource":"a\u0000b"`, 1)},
		"resource missing":        {409, pj, strings.Replace(staleOK, `"resource":"r",`, ``, 1)},
		"stale type on 400":       {400, pj, strings.Replace(staleOK, `409`, `400`, 1)},
		"huge body":               {409, pj, `{"type":"x","title":"` + strings.Repeat("a", httpguard.MaxProblemBytes) + `","status":409}`},
		"invalid UTF-8 in string": {409, pj, "{\"type\":\"\xff\",\"title\":\"t\",\"status\":409}"},
		"nested depth":            {409, pj, strings.Repeat("[", 10000)},
	} {
		t.Run(name, func(t *testing.T) {
			err := httpguard.ErrorFromResponse(response(tc.status, tc.ct, tc.body))
			require.Error(t, err)
			_, stale := fence.IsStale(err)
			assert.False(t, stale, "garbage must never become a StaleError: %v", err)
			if name == "invalid UTF-8 in string" {
				return // decodes (replacement char) into an unknown-type problem
			}
			assert.ErrorIs(t, err, httpguard.ErrUnexpectedResponse)
			var re *httpguard.ResponseError
			require.ErrorAs(t, err, &re)
			assert.Equal(t, tc.status, re.StatusCode)
		})
	}
	assert.ErrorIs(t, httpguard.ErrorFromResponse(nil), httpguard.ErrUnexpectedResponse)
	assert.ErrorIs(t, httpguard.ErrorFromResponse(&http.Response{StatusCode: 500, Header: http.Header{"Content-Type": {pj}}}), httpguard.ErrUnexpectedResponse)
}

// FuzzErrorFromResponse: no body makes ErrorFromResponse panic, and a body
// it accepts as stale names valid, ordered tokens.
func FuzzErrorFromResponse(f *testing.F) {
	f.Add(409, staleOK)
	f.Add(409, `{"type":"x","title":"t","status":409}`)
	f.Add(503, `{"type":"`+httpguard.TypeBusy+`","title":"t","status":503}`)
	f.Add(409, `{"a":`)
	f.Add(409, reusedOK)
	f.Fuzz(func(t *testing.T, status int, body string) {
		err := httpguard.ErrorFromResponse(response(status, httpguard.ProblemContentType, body))
		if status < 400 {
			if err != nil {
				t.Fatalf("status %d: %v", status, err)
			}
			return
		}
		if err == nil {
			t.Fatalf("status %d gave nil error", status)
		}
		if se, ok := fence.IsStale(err); ok {
			if !se.Presented.Valid() || se.Highest <= se.Presented || fence.ValidateResource(se.Resource) != nil {
				t.Fatalf("bad stale error %+v from %q", se, body)
			}
		}
		if re, ok := fence.IsReused(err); ok {
			if !re.Token.Valid() || re.Run == "" || re.MarkRun == "" || re.Run == re.MarkRun ||
				fence.ValidateRun(re.Run) != nil || fence.ValidateRun(re.MarkRun) != nil || fence.ValidateResource(re.Resource) != nil {
				t.Fatalf("bad reused error %+v from %q", re, body)
			}
		}
	})
}

const reusedOK = `{"type":"` + httpguard.TypeTokenReused + `","title":"Fencing token reused","status":409,"resource":"r","presented_token":"7","run":"run-b","mark_run":"run-a"}`

// A token-reused problem decodes to the *fence.ReusedError; a malformed one
// is a *ResponseError, never a ReusedError or a StaleError.
func TestErrorFromResponseReused(t *testing.T) {
	pj := httpguard.ProblemContentType
	err := httpguard.ErrorFromResponse(response(409, pj, reusedOK))
	re, ok := fence.IsReused(err)
	require.True(t, ok, "%v", err)
	assert.Equal(t, fence.ReusedError{Resource: "r", Token: 7, Run: "run-b", MarkRun: "run-a"}, *re)

	err = httpguard.ErrorFromResponse(response(400, pj, `{"type":"`+httpguard.TypeInvalidRun+`","title":"t","status":400}`))
	assert.ErrorIs(t, err, fence.ErrInvalidRun)

	for name, body := range map[string]string{
		"run missing":      strings.Replace(reusedOK, `"run":"run-b",`, ``, 1),
		"mark_run missing": strings.Replace(reusedOK, `,"mark_run":"run-a"`, ``, 1),
		"run invalid":      strings.Replace(reusedOK, `"run":"run-b"`, `"run":"run b"`, 1),
		"mark_run invalid": strings.Replace(reusedOK, `"mark_run":"run-a"`, `"mark_run":"run;a"`, 1),
		"same runs":        strings.Replace(reusedOK, `"run":"run-b"`, `"run":"run-a"`, 1),
		"run number":       strings.Replace(reusedOK, `"run":"run-b"`, `"run":7`, 1),
		"token invalid":    strings.Replace(reusedOK, `"presented_token":"7"`, `"presented_token":"07"`, 1),
		"token missing":    strings.Replace(reusedOK, `"presented_token":"7",`, ``, 1),
		"resource invalid": strings.Replace(reusedOK, `"resource":"r"`, `"resource":""`, 1),
		"status 400":       strings.Replace(reusedOK, `409`, `400`, 1),
	} {
		t.Run(name, func(t *testing.T) {
			status := 409
			if name == "status 400" {
				status = 400
			}
			err := httpguard.ErrorFromResponse(response(status, pj, body))
			assert.ErrorIs(t, err, httpguard.ErrUnexpectedResponse)
			_, reused := fence.IsReused(err)
			assert.False(t, reused)
			_, stale := fence.IsStale(err)
			assert.False(t, stale)
		})
	}
}

// Out-of-scope problems decode to *fence.ScopeError, strictly.
func TestErrorFromResponseOutOfScope(t *testing.T) {
	pj := httpguard.ProblemContentType
	scope := func(status int, resource, scope string) string {
		return fmt.Sprintf(`{"type":"%s","title":"t","status":%d,"resource":%q,"scope":%q}`, httpguard.TypeOutOfScope, status, resource, scope)
	}
	err := httpguard.ErrorFromResponse(response(403, pj, scope(403, "acme/conv-1/notes", "acme/conv-2")))
	se, ok := fence.IsOutOfScope(err)
	require.True(t, ok, "%v", err)
	assert.Equal(t, fence.ScopeError{Resource: "acme/conv-1/notes", Scope: "acme/conv-2"}, *se)
	err = httpguard.ErrorFromResponse(response(403, pj, `{"type":"`+httpguard.TypeOutOfScope+`","title":"t","status":403,"resource":"r"}`))
	se, ok = fence.IsOutOfScope(err)
	require.True(t, ok, "a claim without a scope: %v", err)
	assert.Equal(t, "", se.Scope)
	for name, body := range map[string]string{
		"status 409":      scope(409, "acme/conv-1/notes", "acme/conv-2"),
		"no resource":     scope(403, "", "acme/conv-2"),
		"bad scope":       scope(403, "acme/conv-1/notes", "acme/conv-2/"),
		"inside scope":    scope(403, "acme/conv-1/notes", "acme/conv-1"),
		"scope not str":   `{"type":"` + httpguard.TypeOutOfScope + `","title":"t","status":403,"resource":"r","scope":3}`,
		"control in scop": scope(403, "r", "a\nb"),
	} {
		status := 403
		if name == "status 409" {
			status = 409
		}
		err := httpguard.ErrorFromResponse(response(status, pj, body))
		assert.ErrorIs(t, err, httpguard.ErrUnexpectedResponse, name)
		assert.NotErrorIs(t, err, fence.ErrOutOfScope, name)
	}
	for typ, want := range map[string]error{
		httpguard.TypeInvalidScope:   fence.ErrInvalidScope,
		httpguard.TypeOutcomeUnknown: fence.ErrOutcomeUnknown,
	} {
		err := httpguard.ErrorFromResponse(response(400, pj, `{"type":"`+typ+`","title":"t","status":400}`))
		assert.ErrorIs(t, err, want, typ)
	}
}
