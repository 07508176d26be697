// Package httpguard fences HTTP services that perform side effects: server
// middleware that checks each request's fencing token against any
// fence.Guard before the handler's effects count, and a client
// http.RoundTripper that sends the token from the request context.
//
// # Protocol
//
// A fenced request carries two headers and an optional third (names
// configurable):
//
//	Fencing-Token:    the token, canonical decimal (fence.Parse): 1..9223372036854775807,
//	                  ASCII digits only, no sign, no leading zero, no spaces
//	Fencing-Resource: the resource name, verbatim (fence.ValidateResource rules)
//	Fencing-Run:      optional: the run identity of the token's holder (a lease's run id),
//	                  1..64 bytes of ASCII letters, digits and . _ : - (fence.ValidateRun)
//	Fencing-Scope:    optional: the claim's scope (a lease's lease.Key.Scope), a resource
//	                  name not ending in / (fence.ValidateScope)
//
// Config.Resource may derive the resource from the request (its path, say)
// instead of the header. Token and resource must appear exactly once, the
// run and the scope at most once. The middleware answers:
//
//	400 invalid-token     token header missing, repeated or malformed       (guard not called)
//	400 invalid-run       run header repeated, empty or malformed           (guard not called)
//	400 invalid-scope     scope header repeated, empty or malformed         (guard not called)
//	400 invalid-resource  resource missing, repeated or invalid             (guard not called)
//	403 out-of-scope      Config.Strict, and the resource is outside the claim's scope or the
//	                      claim has none (guard not called); or a strict guard refused it
//	409 stale-token       the token is below the resource's mark
//	409 token-reused      the token equals the mark but the run differs from the run that set it
//	503 busy              the guard could not decide now (fence.ErrBusy), or the request's own
//	                      context ended before it decided; Retry-After set, nothing written
//	500 outcome-unknown   the guard's commit was sent and no answer came back
//	                      (fence.ErrOutcomeUnknown): the write may have been applied
//	500 internal          any other guard failure (details only to Config.ErrorLog)
//	otherwise             the handler's own response, relayed unchanged
//
// Every middleware error is an RFC 9457 application/problem+json object
// with type, title, status and detail; the stale-token 409 also carries the
// extension members resource, presented_token and highest_token (decimal
// strings), the token-reused 409 resource, presented_token, run and
// mark_run, the out-of-scope 403 resource and scope:
//
//	HTTP/1.1 409 Conflict
//	Content-Type: application/problem+json
//
//	{"type":"https://github.com/fencekit/fencekit/blob/main/docs/guards.md#stale-token",
//	 "title":"Stale fencing token","status":409,
//	 "detail":"token 7 is below token 8, which this resource has already accepted",
//	 "resource":"reports/q3","presented_token":"7","highest_token":"8"}
//
// # How the handler runs
//
// The middleware calls g.Fence(ctx, resource, token, write) with ctx =
// fence.WithClaim(r.Context(), claim), so a guard that pairs the token with
// ctx's run (fence.ClaimFor) sees the run header. write runs the handler
// with a request whose context carries the claim (fence.ClaimFromContext:
// token and run), the resource (ResourceFromContext) and whatever the guard
// adds: behind a pgguard.Guard the handler gets the transaction with
// pgguard.TxFromContext and writes through it; behind a guard that stages
// (redisguard, natsguard, fileguard, s3guard, gcsguard) it states the
// resource's new value with fence.Stage(r.Context(), value), which the
// guard writes with the mark. The handler's response is
// buffered. If its status is below 400, write succeeds and the guard
// raises the mark (pgguard commits), and only then is the response sent. If
// it is 400 or more, write fails, the guard does not raise the mark
// (pgguard rolls back) and the handler's response is relayed as it was.
//
// # What is guaranteed
//
//   - Malformed input never reaches the guard and changes no mark.
//   - With a guard whose effects are atomic with its mark (pgguard with the
//     handler writing through the transaction), a 2xx/3xx answer means the
//     handler's writes and the raised mark committed together, and an error
//     answer means neither did.
//   - A write whose token was reused by another run (both runs known) is
//     refused with 409 token-reused, never stale or busy; it is counted and
//     logged at Error (Config.Logger).
//   - The client side: Transport sets the headers from the context's claim
//     and resource; a fenced request (resource in ctx) without a valid claim
//     fails with fence.ErrNoToken (or the claim's validation error) before
//     anything is sent; once the context has ended it fails with an error
//     matching ctx.Err() and context.Cause(ctx), never fence.ErrBusy. A
//     request with a token that fails after it may have been sent (the
//     context ended while the reply was awaited, the connection broke)
//     fails with a *fence.OutcomeUnknownError (fence.ErrOutcomeUnknown),
//     never as "nothing written"; with an *http.Transport as Base, a
//     request for which no connection was obtained counts as not sent.
//     ErrorFromResponse turns a stale-token 409 back into the
//     *fence.StaleError, a token-reused 409 into the *fence.ReusedError, an
//     out-of-scope 403 into the *fence.ScopeError, a 503 into an error
//     matching fence.ErrBusy, an outcome-unknown 500 into one matching
//     fence.ErrOutcomeUnknown, and parses strictly: a malformed body is a
//     *ResponseError, never a panic or a guessed token.
//   - With Config.Strict, a request whose resource lies outside its claim's
//     scope (Fencing-Scope), or that carries no scope, is answered 403
//     out-of-scope and changes nothing.
//
// # Metrics
//
// Config.MeterProvider (OpenTelemetry; nil records nothing) receives
// fencekit.guard.accepted (the handler ran under an admitted token and
// answered below 400), fencekit.guard.stale and fencekit.guard.token_gap
// (stale-token answers) and fencekit.guard.reused (token-reused answers),
// attribute guard="http" only — never the resource name.
// The wrapped guard may count the same decision under its own kind. See
// docs/operations.md.
//
// # What is not guaranteed
//
//   - Effects the handler causes outside the guard's store (calls to other
//     services, files, a memguard-protected in-memory object it mutated
//     before failing) are not rolled back when it answers an error.
//   - The response is buffered (up to Config.MaxResponseBytes): streaming,
//     http.Flusher, hijacking and 1xx informational responses are not
//     supported behind the middleware.
//   - HTTP itself strips leading and trailing spaces and tabs from header
//     values (RFC 9110 §5.5), so "Fencing-Token:  7 " on the wire is the
//     value "7". Everything else that is not canonical is refused.
//   - A response lost on its way to the client leaves the client unsure
//     whether the write committed (fence.ErrOutcomeUnknown); retrying with
//     the same token is safe for the guard (equal tokens are accepted), so
//     handlers should make their writes idempotent per token.
//   - The scope header is the client's statement, like the token: strict
//     mode catches a client that presents one key's claim for another key's
//     resource by mistake, not a client forging headers.
//   - The middleware fences every request it wraps; mount it only on routes
//     with side effects.
package httpguard
