// Package leasehttp serves a lease key's ownership as Server-Sent Events
// (text/event-stream), the server half of a client that reconciles its UI
// with the database: who holds the key, with which token, until when.
//
// A Handler answers GET with one stream per request, fed by
// lease.Manager.Watch. Each event is
//
//	id: <token>
//	event: current | granted | renewed | taken-over | released | expired
//	data: {"kind":…,"state":…,"token":…,"run_id":…,"holder":…,"expires_at":…,"remaining_ms":…}
//
// # Guaranteed
//
//   - Nothing is sent and nothing is subscribed before the Manager's
//     Authorizer accepted the request's key (with the request's context):
//     a refusal is 403 with an empty body. A key the Config's KeyFunc
//     cannot read, or that fails lease.Key.Validate, is 400.
//   - The first event is "current", the key's state read at subscription;
//     then events in token order. The event id is the token, so a browser's
//     automatic reconnect (Last-Event-ID) starts again with the current
//     state; a Last-Event-ID that is not a token is ignored.
//   - A comment line is sent every Heartbeat while nothing else is, so
//     proxies keep the stream open and a dead client is noticed.
//   - At most MaxSubscribers streams at a time per Handler; over that, 503
//     with Retry-After.
//   - Pacing: a stream sends at most PaceBurst event frames at once, then
//     one per Pace (default 10 a second); events that come faster wait at
//     most PaceBurst × Pace and, when more than PaceBurst are waiting, are
//     replaced by one "current" event of the latest state ("dropped":
//     true). A client that reads at least one frame per Pace is therefore
//     never more than a burst behind, however fast the key changes.
//   - On HTTP/1.x the Handler takes the connection over (the response ends
//     when it closes it: Connection: close) and makes its socket send
//     buffer small, so what the client has not read waits in the stream,
//     where it is coalesced, not in the server's kernel. A client that does
//     not read is dropped when one write takes longer than WriteTimeout,
//     that is once its own receive window is full; it never delays other
//     streams, and it holds at most one Watcher's bounded queue.
//   - Close ends every stream and refuses new ones (503).
//
// # Not guaranteed
//
//   - Delivery of every intermediate event to a slow client: it gets the
//     latest state instead (event "current" with "dropped": true).
//   - What the client's own receive buffer holds: data a client's kernel
//     has accepted but the client has not read is out of the server's
//     sight, so a client slower than the pace can fall behind by that much
//     before its writes block; a client that never reads is dropped only
//     once that buffer is full (about 130 KB with Linux defaults).
//   - Over HTTP/2 (the connection is shared, it cannot be taken over)
//     writes go through the ResponseWriter: pacing applies, the socket's
//     buffering is the server's.
//   - Ordering or coverage beyond lease.Manager.Watch's: a grant of a free
//     key is seen within the watch's poll interval.
package leasehttp
