/*
 * fencekit's protocol in Promela: one lease key in PostgreSQL, NC clients
 * that acquire, renew, release, stall and lose replies, a janitor, and one
 * guarded resource per guard kind. docs/model.md explains the model, its
 * bounds and how each step maps to the Go code and SQL.
 *
 * Compile-time switches (spin -D...):
 *   guard under test (exactly one):  GUARD_PG  GUARD_S3  GUARD_MEM
 *   optional operations:             TAKEOVER (grant while held)
 *   bounds:                          NC, MAXTOK, TMAX (see below)
 *   broken variants (each must yield a counterexample):
 *     BROKEN_DRAW_BEFORE_LOCK  token drawn before the row lock (VALUES side)
 *                              on every path, and release DELETEs the row
 *     BROKEN_CHECK_THEN_WRITE  the guard decides in one step and writes in
 *                              a later one
 *     BROKEN_S3_METADATA       S3: token in metadata, If-Match on the data
 *                              ETag (MD5 of the bytes)
 *     BROKEN_REVIVE            renew without "released_at IS NULL AND
 *                              expires_at > now"
 *     BROKEN_NO_TRUST          the holder trusts until told otherwise
 *     BROKEN_DRIFT             local clock drifts by more than the margin
 *     BROKEN_SHORT_RETENTION   janitor retention below the statement bound
 */

/* ---- bounds ---------------------------------------------------------- */
#ifndef NC
#define NC      2   /* clients */
#endif
#ifndef MAXTOK
#define MAXTOK  6   /* token bound: nextval() beyond it blocks */
#endif
#ifndef TMAX
#define TMAX    5   /* last tick of the database clock */
#endif
#define TTL     3   /* lease TTL, ticks */
#define MARGIN  1   /* SafetyMargin: trust = sent_at + TTL - MARGIN */
#define SB      1   /* statement bound (statement_timeout), ticks */
#ifdef BROKEN_SHORT_RETENTION
#define RET     0
#endif
#ifndef RET
#define RET     2   /* janitor retention; the code requires >= 100 x SB */
#endif
#ifdef BROKEN_DRIFT
#define DRIFT   (MARGIN+1)
#else
#define DRIFT   MARGIN /* a slow local clock under-measures by <= MARGIN */
#endif

#if !defined(GUARD_PG) && !defined(GUARD_S3) && !defined(GUARD_MEM)
#define GUARD_MEM
#endif

/* ---- the database clock ---------------------------------------------- */
byte now;                 /* clock_timestamp(); one tick per Clock step */

/* ---- the lease row for the key (fencekit_leases) --------------------- */
bool row_exists;
byte row_run;             /* run_id of the holder: 1+c (see docs/model.md) */
byte row_tok;             /* fence_token */
byte row_exp;             /* expires_at */
bool row_rel;             /* released_at IS NOT NULL */
byte seq;                 /* fencekit_token_seq: last value handed out */

/* ---- ghosts (never read by the protocol, only by assertions) ---------- */
byte last_grant;          /* token of the latest grant of the key */
byte gexp[NC];            /* expiry the database last committed for c's run */
bool lapsed[NC];          /* c's current run has been expired in the database */

#ifdef TAKEOVER
bool taken[NC];           /* c's current run was taken over */
#define TAKEN(i) || taken[i]
#define UNTAKE(c) taken[c] = 0
#else
#define TAKEN(i)
#define UNTAKE(c) skip
#endif

/* ---- holder state the clock normalises (see Clock) ---------------------- */
byte trust[NC];           /* local trust deadline; 0 once passed (lease ended) */
byte rsent[NC];           /* sent_at of the renewal in flight, 0 = none */
byte hi;                  /* highest token the guarded resource accepted */

/* ---- guards ------------------------------------------------------------ */
#ifdef GUARD_PG
byte pg_mark;             /* fencekit_guard_marks.highest_token (committed) */
byte pg_lock;             /* 0 or 1+c: transaction holding the mark's row lock */
#endif
#ifdef GUARD_S3
byte s3_etag;             /* ETag of the object at the user's key, 0 = none */
byte s3_tok;              /* token (pointer body; metadata in the variant) */
byte s3_wid;              /* write id in the pointer body */
#endif
#ifdef GUARD_MEM
byte mem_mark;            /* entry.mark, guarded by entry.lock */
#endif

/* nextval('fencekit_token_seq'): NO CYCLE, CACHE 1. At the token bound
 * x = 0: the statement fails and rolls back, writing nothing (the search is
 * cut there; a failing statement is a behaviour of the real system too). */
inline nextval(x) {
	if
	:: seq < MAXTOK -> seq++; x = seq
	:: else -> x = 0
	fi
}

/* A write is accepted by the resource (P1). */
inline accepted(tk) {
	assert(tk >= hi);     /* P1: no write accepted after a higher token */
	hi = tk
}

/* A grant committed (P2, P3). */
inline granted(c, tk, exp) {
	assert(tk > last_grant);     /* P2: every grant above every earlier one */
	last_grant = tk;
	gexp[c] = exp;
	lapsed[c] = 0;
	UNTAKE(c)
}

/* P3 at a non-takeover grant: no other run holds an unexpired lease. */
inline no_other_holder(c) {
	for (i : 0 .. NC-1) {
		assert(i == c || gexp[i] <= now TAKEN(i))
	}
}

active proctype Clock() {
	byte i;
end:	do
	:: now < TMAX ->
		d_step {
			now++;
			for (i : 0 .. NC-1) {
				/* the database lease of i's run expired: forget when */
				if
				:: gexp[i] != 0 && gexp[i] <= now -> gexp[i] = 0; lapsed[i] = 1
				:: else -> skip
				fi;
				/* i's trust deadline passed: Lease.onTrustTimer ends the
				 * lease (ErrTrustExpired); nothing reads the old value */
				if
				:: trust[i] != 0 && now >= trust[i] + DRIFT -> trust[i] = 0
				:: else -> skip
				fi
			};
			i = 0
		}
	od
}

/* Janitor.Sweep: DELETE rows whose expires_at < now - Retention. One
 * statement; FOR UPDATE SKIP LOCKED plus PostgreSQL's re-check makes it
 * atomic with respect to the lease statements, which are single steps at
 * the row. */
active proctype Janitor() {
end:	do
	:: atomic { row_exists && row_exp + RET < now ->
		row_exists = 0; row_run = 0; row_tok = 0; row_exp = 0; row_rel = 0 }
	od
}

/* local trust check: Lease.Context() not cancelled. The holder's clock may
 * under-measure elapsed time by up to DRIFT ticks. */
#ifdef BROKEN_NO_TRUST
#define trusted (1)
#else
#define trusted (trust[c] != 0)
#endif

#define rid (c+1)
#define WID (c+1)   /* S3 write id: fresh per lease (see docs/model.md) */
/* back to idle, forgetting the ended lease (so equal futures merge) */
#define GOIDLE { tok = 0; trust[c] = 0; rsent[c] = 0; t = 0; v = 0; lapsed[c] = 0; goto end_idle }

proctype Client(byte c) {
	byte tok, t, v, i;
#ifdef GUARD_S3
	byte etag;
	bool landed;
#endif
#ifdef GUARD_MEM
	byte seen;
#endif
#ifdef GUARD_PG
	byte seen;
#endif


	/* ---- Manager.tryAcquire: the acquire statement ------------------ */
	/* A1: the statement starts: now_db sampled (also sent_at: the request
	 * leaves no earlier), VALUES-side nextval() drawn before any row lock. */
end_idle:
	atomic { seq < MAXTOK -> t = now; nextval(v) };
	/* A stall may happen here (the statement is bounded by SB). */
	/* A2: speculative insert; on conflict the row lock and DO UPDATE. */
	atomic {
		if
		:: now > t + SB -> GOIDLE  /* statement_timeout */
		:: else -> skip
		fi;
		if
		:: !row_exists ->
			row_exists = 1; row_run = rid; row_tok = v;
			row_exp = t + TTL; row_rel = 0; tok = v;
			no_other_holder(c); granted(c, tok, row_exp)
		:: row_exists && row_exp <= t ->
#ifdef BROKEN_DRAW_BEFORE_LOCK
			tok = v;              /* fence_token = EXCLUDED.fence_token */
#else
			nextval(tok);         /* fence_token = nextval(...) in DO UPDATE SET */
			if :: tok == 0 -> GOIDLE :: else -> skip fi;
#endif
			row_run = rid; row_tok = tok; row_exp = t + TTL; row_rel = 0;
			no_other_holder(c); granted(c, tok, row_exp)
#ifdef TAKEOVER
		:: row_exists && row_exp > t ->   /* takeover: grant while held */
			nextval(tok);
			if :: tok == 0 -> GOIDLE :: else -> skip fi;
			if :: row_run != rid && row_exp > now -> taken[row_run-1] = 1 :: else -> skip fi;
			row_run = rid; row_tok = tok; row_exp = t + TTL; row_rel = 0;
			granted(c, tok, row_exp)
#endif
		:: row_exists && row_exp > t -> tok = 0  /* refused: held */
		fi;
		v = 0; i = 0;
		if
		:: tok == 0 -> t = 0; GOIDLE
		:: tok != 0 ->            /* reply arrives */
			trust[c] = t + TTL - MARGIN; t = 0
		fi
	};

	/* ---- holding: writes, renewals, release, stalls -------------------- */
hold:
	do
	:: atomic { trusted ->
		/* P4: a write starts only while the writer's lease is unexpired
		 * in the database (what the trust deadline is for). */
		assert(now < gexp[c]);
		goto write }
	:: atomic { trusted && rsent[c] == 0 -> rsent[c] = now + 1 }   /* renew sent (stored +1) */
	:: atomic { rsent[c] != 0 ->   /* the renew statement runs at the database */
			if
#ifdef BROKEN_REVIVE
			:: row_exists && row_run == rid ->
#else
			:: row_exists && row_run == rid && !row_rel && row_exp > now ->
#endif
#ifndef NO_P5
				assert(!lapsed[c]);   /* P5: an expired lease stays expired */
#endif
				row_exp = now + TTL; gexp[c] = row_exp;
				if
				:: trusted ->     /* reply: extend (a stale reply never shortens) */
					if
					:: rsent[c] - 1 + TTL - MARGIN > trust[c] -> trust[c] = rsent[c] - 1 + TTL - MARGIN
					:: else -> skip
					fi
				:: skip           /* reply lost, or came after the deadline */
				fi
			:: else ->            /* refused: ErrLost, or the reply was lost */
				if
				:: GOIDLE      /* ErrLost: the lease ends (a Release then matches nothing) */
				:: skip
				fi
			fi;
			rsent[c] = 0
		}
	:: goto release           /* Lease.Release (also after loss or expiry) */
	:: atomic { GOIDLE }      /* crash / give up: the row expires by TTL */
	od;

release:
	/* release statement: WHERE run_id AND released_at IS NULL AND
	 * expires_at > now: SET released_at = now, expires_at = now. */
	atomic {
		rsent[c] = 0; trust[c] = 0; tok = 0;
		if
		:: row_exists && row_run == rid && !row_rel && row_exp > now ->
#ifdef BROKEN_DRAW_BEFORE_LOCK
			row_exists = 0; row_run = 0; row_tok = 0; row_exp = 0; row_rel = 0;
#else
			row_rel = 1; row_exp = now;
#endif
			gexp[c] = 0; lapsed[c] = 1
		:: else -> skip
		fi;
		GOIDLE
	};

	/* ---- one guarded write with token tok ---------------------------- */
write:
#ifdef GUARD_MEM
	/* memguard.Fence: lock; fence.Decide; write; raise mark; unlock. */
#ifdef BROKEN_CHECK_THEN_WRITE
	atomic { seen = mem_mark; if :: tok < seen -> seen = 0; goto hold :: else -> skip fi };
	atomic { accepted(tok); mem_mark = tok; seen = 0 };
#else
	atomic {
		if
		:: tok >= mem_mark -> accepted(tok); mem_mark = tok
		:: else -> skip       /* *fence.StaleError */
		fi
	};
#endif
	goto hold;
#endif

#ifdef GUARD_PG
#ifdef BROKEN_CHECK_THEN_WRITE
	/* SELECT highest_token ...; then, in another statement, the write and
	 * UPDATE of the mark. */
	atomic { seen = pg_mark; if :: tok < seen -> seen = 0; goto hold :: else -> skip fi };
	atomic { accepted(tok); pg_mark = tok; seen = 0 };
	goto hold;
#else
	/* pgguard.Fence: BEGIN + fence upsert (row lock held to the end of the
	 * transaction); RETURNING the mark; decide. */
	atomic {
		if
		:: pg_lock == 0 ->
			if
			:: tok >= pg_mark -> pg_lock = c + 1    /* admitted, mark raised in tx */
			:: else -> goto hold                    /* stale */
			fi
		:: pg_lock != 0 -> goto hold                /* lock_timeout: ErrBusy */
		fi
	};
	/* the caller's statements run in the transaction; then COMMIT */
	atomic {
		if
		:: accepted(tok); pg_mark = tok; pg_lock = 0   /* commit */
		:: pg_lock = 0                                  /* rollback / error */
		fi
	};
	goto hold;
#endif
#endif

#ifdef GUARD_S3
	/* s3guard write: GET pointer, decide, stage data (immutable, fresh
	 * key: no shared state), PUT pointer If-Match ETag; 412 -> re-read. */
	landed = 0;
s3read:
	atomic {
		etag = s3_etag;
		if
		:: s3_tok > tok -> goto s3done                  /* stale */
		:: else -> skip
		fi
	};
s3put:
	atomic {
		if
		:: s3_etag == etag ->                            /* 200 */
#ifdef BROKEN_S3_METADATA
			s3_etag = 1;          /* ETag = MD5(bytes): every writer's bytes identical */
#else
			s3_etag = WID*16 + tok;   /* ETag = MD5(pointer body {token, write id}) */
#endif
			s3_tok = tok; s3_wid = WID; landed = 1; accepted(tok);
			if
			:: goto s3done                               /* reply arrives */
			:: goto s3put                                /* reply lost: SDK retries */
			fi
		:: else ->                                       /* 412: re-read */
			if
			:: s3_wid == WID -> assert(landed); goto s3done  /* P6: ours: success */
			:: s3_wid != WID && s3_tok > tok -> goto s3done  /* stale */
			:: s3_wid != WID && s3_tok <= tok -> goto s3read /* decide again, retry */
			:: s3_wid != WID && s3_tok <= tok -> goto s3done /* MaxAttempts: ErrBusy */
			fi
		fi
	};
s3done:
	atomic { etag = 0; landed = 0; goto hold }
#endif
}

init {
	byte c;
	atomic {
		for (c : 0 .. NC-1) {
			run Client(c)
		};
		c = 0
	}
}
