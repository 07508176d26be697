/*
 * fencekit's protocol in Promela: one lease key in PostgreSQL, NC clients
 * that acquire, renew, release, stall and lose replies, a janitor, and one
 * guarded resource per guard kind. docs/model.md explains the model, its
 * bounds and how each step maps to the Go code and SQL.
 *
 * Compile-time switches (spin -D...):
 *   guard under test (exactly one):  GUARD_PG  GUARD_S3  GUARD_MEM
 *   optional operations:             TAKEOVER (grant while held)
 *                                    FAILOVER (the database moves to a new
 *                                    node once; grants are gated on the
 *                                    checked node and the floor, and a
 *                                    refused client runs the automatic
 *                                    floor check with the guard's mark as
 *                                    the source)
 *                                    LOSS (with FAILOVER: the new node has
 *                                    the state an asynchronous replica last
 *                                    received, possibly older)
 *   bounds:                          NC, MAXTOK, TMAX, GAP (see below)
 *   HEARTBEAT                        the per-Manager heartbeat instead:
 *                                    NC Managers holding NK keys under
 *                                    heartbeat epochs (heartbeat.pml, its
 *                                    own switches and broken variants)
 *   NO_JANITOR                       leave the janitor out (the failover
 *                                    configurations: it touches nothing
 *                                    the failover changes)
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
 *     BROKEN_CHECK_NO_COMPARE  the floor check records the node without
 *                              comparing the sequence with the floor
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
#ifndef TTL
#define TTL     3   /* lease TTL, ticks */
#endif
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
#ifndef GAP
#define GAP     0   /* FloorConfig.Gap: jump of the sequence at a node change */
#endif

#ifdef HEARTBEAT
#include "heartbeat.pml"
#else

/* ---- the database clock ---------------------------------------------- */
byte now;                 /* clock_timestamp(); one tick per Clock step */

/* ---- the lease row for the key (fencekit_leases) --------------------- */
bool row_exists;
byte row_run;             /* run_id of the holder: 1+c (see docs/model.md) */
byte row_tok;             /* fence_token */
byte row_exp;             /* expires_at */
bool row_rel;             /* released_at IS NOT NULL */
byte seq;                 /* fencekit_token_seq: last value handed out */

#ifdef FAILOVER
/* ---- the node and the floor row (fencekit_token_floor) ---------------- */
byte node;                /* fencekit_node(): 0, then 1 after the failover */
byte checked;             /* checked_node */
byte floor;               /* floor */
bool failed;              /* the failover happened */
byte draws;               /* nextval() calls so far: the token bound counts them */
byte ctok[NC];            /* ghost: token of c's latest grant */
#define SETCTOK(c, tk) ctok[c] = tk;
#define CANDRAW (draws < MAXTOK)
#ifdef LOSS
/* what the asynchronous replica has received (Replicate copies it) */
bool r_exists, r_rel;
byte r_run, r_tok, r_exp, r_seq, r_floor, r_checked;
#endif
#else
#define SETCTOK(c, tk)
#define CANDRAW (seq < MAXTOK)
#endif

/* ---- ghosts (never read by the protocol, only by assertions) ---------- */
byte last_grant;          /* token of the latest grant of the key */
byte gexp[NC];            /* expiry the database last committed for c's run */
bool lapsed[NC];          /* c's current run has been expired in the database */

#if defined(TAKEOVER) || defined(LOSS)
bool taken[NC];           /* c's current run was taken over, or its grant lost in a failover */
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
	:: CANDRAW -> seq++; x = seq
#ifdef FAILOVER
		; draws++
#endif
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
	SETCTOK(c, tk)
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
#ifndef NO_JANITOR
active proctype Janitor() {
end:	do
	:: atomic { row_exists && row_exp + RET < now ->
		row_exists = 0; row_run = 0; row_tok = 0; row_exp = 0; row_rel = 0 }
	od
}
#endif

#ifdef FAILOVER
/* The database moves to a new node once (promotion: a new timeline). With
 * LOSS the new node has what the replica last received: the row, the
 * sequence and the floor row as Replicate last copied them. The guard's
 * marks live in another database and survive. A grant the new node does
 * not have (nor its latest renewal) is no longer a database holder (taken:
 * P3 does not count it; the guards must stop it), and a restored row of
 * an older run of a client belongs to another run id than the client's
 * current one (run ids are fresh UUIDs in the code). */
active proctype Failover() {
	byte i;
	atomic { !failed ->
		failed = 1; node = 1;
#ifdef LOSS
		row_exists = r_exists; row_run = r_run; row_tok = r_tok; row_exp = r_exp; row_rel = r_rel;
		seq = r_seq; floor = r_floor; checked = r_checked;
		for (i : 0 .. NC-1) {
			if
			:: row_exists && row_run == i+1 && row_tok != ctok[i] -> row_run = NC+1
			:: else -> skip
			fi;
			/* i's grant or latest renewal is not on the new node: the
			 * database no longer counts i as holding until gexp[i] */
			if
			:: !(row_exists && row_run == i+1 && row_exp == gexp[i]) -> taken[i] = 1
			:: else -> skip
			fi
		};
		r_exists = 0; r_rel = 0; r_run = 0; r_tok = 0; r_exp = 0; r_seq = 0; r_floor = 0; r_checked = 0;
#endif
		i = 0
	}
}

#ifdef LOSS
/* Asynchronous streaming: at any time before the failover the replica
 * catches up with everything committed so far. */
active proctype Replicate() {
end:	do
	:: atomic { !failed && (r_exists != row_exists || r_run != row_run || r_tok != row_tok ||
	            r_exp != row_exp || r_rel != row_rel || r_seq != seq || r_floor != floor || r_checked != checked) ->
		r_exists = row_exists; r_run = row_run; r_tok = row_tok; r_exp = row_exp; r_rel = row_rel;
		r_seq = seq; r_floor = floor; r_checked = checked }
	od
}
#endif
#endif

/* the floor source of the automatic check: the guard's committed mark */
#ifdef GUARD_PG
#define MARK pg_mark
#endif
#ifdef GUARD_MEM
#define MARK mem_mark
#endif
#ifdef GUARD_S3
#define MARK s3_tok
#endif

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
#ifdef FAILOVER
#define GOIDLE { tok = 0; trust[c] = 0; rsent[c] = 0; t = 0; v = 0; lapsed[c] = 0; gok = 0; snode = 0; src = 0; goto end_idle }
#else
#define GOIDLE { tok = 0; trust[c] = 0; rsent[c] = 0; t = 0; v = 0; lapsed[c] = 0; goto end_idle }
#endif

proctype Client(byte c) {
	byte tok, t, v, i;
#ifdef FAILOVER
	bool gok;                 /* the acquire statement's gate passed */
	byte snode;               /* the node the statement started on */
	byte src;                 /* the floor source's value, as read */
#endif
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
#ifdef FAILOVER
	/* the gate (migration 0004) is read in the statement's snapshot, with
	 * the VALUES-side token */
	atomic { CANDRAW -> t = now; nextval(v); snode = node; gok = (checked == node && v > floor) };
#else
	atomic { CANDRAW -> t = now; nextval(v) };
#endif
	/* A stall may happen here (the statement is bounded by SB). */
	/* A2: speculative insert; on conflict the row lock and DO UPDATE. */
	atomic {
		if
		:: now > t + SB -> GOIDLE  /* statement_timeout */
		:: else -> skip
		fi;
#ifdef FAILOVER
		if
		:: node != snode -> GOIDLE   /* the old primary died with the statement */
		:: node == snode && !gok -> goto check  /* FK002 / FK001: nothing written */
		:: else -> skip
		fi;
#endif
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

#ifdef FAILOVER
	goto hold;
	/* ---- Manager.floorCheckAfter: the automatic floor check ----------- */
	/* the Manager reads its floor source (the guard's marks, in the
	 * database that survives), then calls fencekit_check_floor: one step
	 * (its advance runs under LOCK TABLE fencekit_leases; a statement whose
	 * snapshot precedes its commit reads the old checked_node). Then the
	 * Manager tries the grant again (back to idle: the next acquire). */
check:
	atomic { src = MARK };
	atomic {
		i = floor;
		if :: src > i -> i = src :: else -> skip fi;
#ifdef BROKEN_CHECK_NO_COMPARE
		checked = node;
#else
		if
		:: GAP > 0 && checked != node && seq + GAP > i -> i = seq + GAP
		:: else -> skip
		fi;
		if
		:: seq + 1 <= i -> seq = i     /* setval(seq, floor, true) */
		:: else -> skip
		fi;
		floor = i; checked = node;
#endif
		i = 0;
		GOIDLE
	};
#endif

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
#endif /* HEARTBEAT */
