/*
 * The fenced-effects protocol (package effects) in Promela: record under
 * the lease claim, relay claim (epoch bump), deliver, outcome under the
 * claim's epoch, and the new holder's cancel of a displaced run's effects.
 * docs/effects.md ("The protocol model") explains what it proves and how
 * each step maps to the SQL in effects/statements.go.
 *
 * Actors
 *   Producer   the run holding token 1 of the lease key; records effect 0
 *              (target "pay": idempotency keys) and effect 1 (target
 *              "once": at-most-once), each in a transaction of its own:
 *              lease.CheckClaimTx (SELECT ... FOR SHARE of the lease row),
 *              the INSERT, COMMIT. It can be displaced at any point.
 *   Takeover   grants token 2 for the key (the lease's takeover UPDATE
 *              needs the row lock, so it waits for a record transaction
 *              holding the share lock); the new holder then may run
 *              CancelDisplaced (-DCANCEL).
 *   Relay x2   claim (FOR UPDATE SKIP LOCKED, epoch + 1, claimed_until,
 *              first_sent_at, sending for an at-most-once target),
 *              deliver, write the outcome under the claim's epoch. Each can
 *              pause anywhere (the interleaving), crash after its claim or
 *              after its send (MAXCRASH per relay: local state lost).
 *   Expiry     a claim's claimed_until passes (time goes by while its
 *              relay is paused or slow): another relay may claim again.
 *   Window     the "pay" target's dedup window for an effect closes: it
 *              forgets the key; a later claim that sees the window passed
 *              ends the effect ambiguous instead of sending.
 *   Target     "pay" applies a key the first time it sees it within its
 *              window (a 503 applies nothing, a dropped reply applies);
 *              "once" applies every request it receives.
 *
 * Compile-time switches (spin -D...):
 *   CANCEL                   the new holder runs CancelDisplaced
 *   MAXEP, MAXCRASH          bounds (claims per effect, crashes per relay)
 *   WINDOW_ANY               drop the window assumption (see Window): the
 *                            "pay" target may then apply a key twice, the
 *                            limit of "once" that docs/effects.md states
 *   broken variants (each must yield a counterexample):
 *     BROKEN_NO_LEASE_CHECK  Record inserts without checking the lease row
 *     BROKEN_UNLOCKED_CHECK  the lease check reads the row without FOR SHARE
 *     BROKEN_NO_EPOCH_CHECK  the outcomes UPDATE lacks "e.epoch = o.epoch"
 *     BROKEN_CANCEL_CLAIMED  CancelDisplaced lacks "epoch = 0" (cancels
 *                            effects a relay has claimed)
 *     BROKEN_AMO_RESEND      a claim that finds an at-most-once effect
 *                            sending sends it again (shows P2 is not vacuous)
 */

#ifndef MAXEP
#define MAXEP    3   /* claims per effect: a claim beyond it is not made */
#endif
#ifndef MAXCRASH
#define MAXCRASH 1   /* crashes per relay */
#endif
#define NE 2         /* effects: 0 to "pay" (keyed), 1 to "once" (at most once) */
#define AMO(e) (e == 1)

/* effect states (fencekit_effects.state; NONE = no row) */
#define NONE      0
#define PENDING   1
#define SENDING   2
#define DELIVERED 3
#define AMBIGUOUS 4
#define CANCELED  5
#define FINAL(e) (st[e] >= DELIVERED)

/* ---- the lease row ------------------------------------------------------ */
byte lease_tok = 1;       /* fence_token of the current grant */
byte shlock;              /* record transactions holding FOR SHARE on the row */

/* ---- the effects rows --------------------------------------------------- */
byte st[NE];              /* state */
byte ep[NE];              /* epoch */
bool live[NE];            /* claimed_until in the future */
bool fsent[NE];           /* first_sent_at set */
byte tokof[NE];           /* fence_token of the recording run */

/* ---- the "pay" target ---------------------------------------------------- */
bool seen[NE];            /* it remembers the key (inside its dedup window) */
bool closed[NE];          /* the window for the effect's key has closed */
byte inflight[NE];        /* relays between a claim that will send and the send */

/* ---- ghosts (read only by assertions) ------------------------------------ */
bool displaced[3];        /* displaced[t]: a grant after token t was made */
byte applied[NE];         /* times the target applied the effect */
bool canceled[NE];        /* the effect was canceled */

/* P1: no effect is recorded by a run after its displacement was granted. */
inline commit_record(e, tok) {
	assert(!displaced[tok]);
	st[e] = PENDING; tokof[e] = tok
}

/* The target receives effect e (P2). */
inline receive(e) {
	assert(!canceled[e]);       /* P3: nothing canceled reaches the target */
}

inline apply(e) {
	applied[e]++;
	assert(applied[e] <= 1)     /* P2: each effect applied at most once */
}

active proctype Producer() {
	byte e;
	for (e : 0 .. NE-1) {
		/* BEGIN; SET LOCAL lock_timeout; lease.CheckClaimTx */
#if defined(BROKEN_NO_LEASE_CHECK)
		skip;
#elif defined(BROKEN_UNLOCKED_CHECK)
		if
		:: lease_tok == 1 -> skip
		:: else -> goto refused
		fi;
#else
		atomic {
			if
			:: lease_tok == 1 -> shlock++
			:: else -> goto refused   /* fence.ErrStale: rolled back */
			fi
		}
#endif
		/* INSERT ... ON CONFLICT DO NOTHING (visible at COMMIT) */
		skip;
		/* COMMIT: the row becomes visible, the share lock ends */
		atomic {
			commit_record(e, 1);
#if !defined(BROKEN_NO_LEASE_CHECK) && !defined(BROKEN_UNLOCKED_CHECK)
			shlock--
#endif
		}
	};
refused:
	skip
}

active proctype Takeover() {
	byte e;
	/* the takeover UPDATE of the lease row waits for the share locks */
	atomic { shlock == 0 -> lease_tok = 2; displaced[1] = true };
#ifdef CANCEL
	/* CancelDisplaced: one UPDATE (row locks: each row atomically) */
	for (e : 0 .. NE-1) {
		atomic {
			if
#ifdef BROKEN_CANCEL_CLAIMED
			:: st[e] == PENDING && tokof[e] < 2 ->
#else
			:: st[e] == PENDING && tokof[e] < 2 && ep[e] == 0 ->
#endif
				st[e] = CANCELED; canceled[e] = true
			:: else -> skip
			fi
		}
	}
#endif
}

/* A claim's claimed_until passes. */
active proctype Expiry() {
end:	do
	:: atomic { live[0] -> live[0] = false }
	:: atomic { live[1] -> live[1] = false }
	od
}

/* The "pay" target's window for an effect closes. Assumption (stated in
 * docs/effects.md): no relay that claimed the effect inside the window is
 * still on its way to send it (a pause between claim and send is shorter
 * than the window; the relay bounds its send by the claim's deadline and
 * by the window measured at the claim). */
active proctype Window() {
end:	do
#ifdef WINDOW_ANY
	/* no assumption: the window may close while a relay is on its way */
	:: atomic { fsent[0] && !closed[0] -> closed[0] = true; seen[0] = false }
#else
	:: atomic { fsent[0] && !closed[0] && inflight[0] == 0 -> closed[0] = true; seen[0] = false }
#endif
	od
}

/* The outcome write (a final state, or PENDING for a retry): the relay's
 * outcomes statement, UPDATE ... WHERE e.id = o.id AND e.epoch = o.epoch
 * AND final_at IS NULL for each row. A miss changes nothing (the relay
 * counts it superseded). One statement may carry the outcomes of several
 * effects of one relay; each row is checked on its own, so the rows'
 * writes are those of this inline, at one instant. */
#ifdef BROKEN_NO_EPOCH_CHECK
#define WRITES (!FINAL(e))
#else
#define WRITES (ep[e] == myep && !FINAL(e))
#endif
inline outcome(s) {
	atomic {
		if
		:: WRITES ->
			/* P4: a late outcome from a stale epoch changes nothing */
			assert(ep[e] == myep);
			st[e] = s; live[e] = false
		:: !WRITES -> skip
		fi
	}
}

#define CLAIMABLE(x) ((st[x] == PENDING || st[x] == SENDING) && !live[x] && ep[x] < MAXEP)

proctype Relay() {
	byte e, myep, crashes;
	bool wassending, willsend, pastwin, ok;
	/* claim: one UPDATE over the due rows, SKIP LOCKED */
end:
claim:
	atomic {
		if
		:: CLAIMABLE(0) -> e = 0
		:: CLAIMABLE(1) -> e = 1
		fi;
		ep[e]++; myep = ep[e]; live[e] = true; fsent[e] = true;
#ifdef BROKEN_AMO_RESEND
		wassending = false;
#else
		wassending = (st[e] == SENDING);
#endif
		pastwin = (!AMO(e) && closed[e]);
		willsend = !wassending && !pastwin;
		if
		:: AMO(e) -> st[e] = SENDING
		:: else -> skip
		fi;
		if
		:: willsend -> inflight[e]++
		:: else -> skip
		fi
	};
	if
	:: crashes < MAXCRASH ->   /* crash after the claim */
		crashes++;
		if
		:: willsend -> inflight[e]--
		:: else -> skip
		fi;
		goto claim
	:: true -> skip
	fi;
	if
	:: wassending -> outcome(AMBIGUOUS); goto claim   /* an earlier send may have happened */
	:: pastwin -> outcome(AMBIGUOUS); goto claim      /* the dedup window passed */
	:: else -> skip
	fi;
	/* deliver */
	if
	:: AMO(e) ->
		if
		:: atomic { inflight[e]--; receive(e); apply(e) }; /* sent */
			if
			:: crashes < MAXCRASH -> crashes++; goto claim  /* crash after the send */
			:: true -> skip
			fi;
			if
			:: outcome(DELIVERED)
			:: outcome(AMBIGUOUS)                  /* reply lost: unknown, not resent */
			fi
		:: inflight[e]--; outcome(PENDING)          /* NotSent (connect refused): retry */
		fi
	:: else ->
		atomic {
			inflight[e]--; receive(e);
			if
			:: !seen[e] -> seen[e] = true; apply(e); ok = true   /* applied, answered */
			:: !seen[e] -> seen[e] = true; apply(e); ok = false  /* applied, reply dropped */
			:: !seen[e] -> ok = false                            /* 503: not applied */
			:: seen[e] -> ok = true                              /* replayed: the first answer */
			fi
		};
		if
		:: crashes < MAXCRASH -> crashes++; goto claim  /* crash after the send */
		:: true -> skip
		fi;
		if
		:: ok -> outcome(DELIVERED)
		:: else -> outcome(PENDING)                 /* 5xx, timeout, dropped reply: retry */
		fi
	fi;
	goto claim
}

/* P5: when nothing can move, every recorded effect is final, or was
 * claimed MAXEP times (the bound cut its retries). */
active proctype Quiescent() {
	byte e;
	timeout;
	for (e : 0 .. NE-1) {
		assert(st[e] == NONE || FINAL(e) || ep[e] == MAXEP)
	}
}

init {
	atomic { run Relay(); run Relay() }
}
