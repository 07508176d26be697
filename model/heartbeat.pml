/*
 * The per-Manager heartbeat (-DHEARTBEAT; fencekit.pml includes this file
 * in place of its one-key model). NC Managers, NK keys: a Manager holds
 * any number of keys under one heartbeat epoch, a fencekit_managers row
 * renewed by one statement, and a lease row written by a heartbeat grant
 * has expires_at = 'infinity' and names the epoch (manager_id), so it is
 * live exactly while that epoch is. docs/model.md, "The heartbeat",
 * explains the model, its bounds and the mapping to the SQL.
 *
 * Switches in this mode (besides the bounds of fencekit.pml):
 *   TAKEOVER             Manager.Takeover beside Manager.Acquire
 *   ROLLING              Manager NC-1 runs the v0.1.0 (per-lease)
 *                        statements beside the heartbeat Managers
 *   HB_LOCKED_READ       live() reads the manager row with a scalar
 *                        sub-select FOR SHARE (waits for a heartbeat in
 *                        flight); without it, a plain EXISTS in the
 *                        statement's snapshot
 *   HB_GUARD             an in-process guard per key (P1; a larger search)
 *   HB_SYMMETRIC         Manager 1 renews and releases too (a larger search)
 *   PARK                 Lease.Park and Manager.Resume (migration 0012):
 *                        a Manager parks a lease (the row keeps its run and
 *                        token, expires IDLE ticks later, names no epoch);
 *                        either Manager resumes a parked run by its run_id
 *   NO_JANITOR           leave the janitor out
 *   NO_P3DB, NO_P5       leave out P3 (the database's account) or P5
 *   NK, NE               keys (2), epochs in all (3)
 *   broken variants (each must yield a counterexample):
 *     BROKEN_HB_IGNORED  the grant ignores the holder's heartbeat: the row
 *                        gets the epoch's expiry at grant time, a finite
 *                        value the heartbeat never moves, and live() reads
 *                        only that
 *     BROKEN_HB_REVIVE   heartbeat renewal without "expires_at > now"
 *     BROKEN_HB_SNAPSHOT live() without "held.acquired_at >= EXCLUDED.
 *                        acquired_at counts as live": a statement whose
 *                        snapshot predates the holder's epoch row sees no
 *                        live manager
 *     BROKEN_HB_GRANT_TRUST  a grant's trust deadline from the acquire's
 *                        send time (as a per-lease grant's), not from the
 *                        epoch's last heartbeat
 *     BROKEN_RESUME_ANY_RUN  (with PARK) Resume without "run_id = $3": it
 *                        takes whichever run is parked on the key
 */

#ifndef NK
#define NK      2   /* keys */
#endif
#if NK != 2
#error "the heartbeat model is written for NK == 2"
#endif
#if NC != 2
#error "the heartbeat model is written for NC == 2"
#endif
#ifndef NE
#define NE      3   /* heartbeat epochs (manager_ids) in all: a new one beyond blocks */
#endif
#if defined(GUARD_PG) || defined(GUARD_S3)
#error "the heartbeat model has the in-process guard only (GUARD_MEM)"
#endif
#if defined(PARK) && defined(ROLLING)
#error "PARK is modelled without the v0.1.0 Manager (ROLLING)"
#endif

#define K(c, k) ((c)*NK + (k))

/* ---- the database clock and the token sequence -------------------------- */
byte now;                 /* clock_timestamp(); one tick per Clock step */
byte seq;                 /* fencekit_token_seq: last value handed out */

/* ---- fencekit_leases: one row per key ------------------------------------ */
bool row_exists[NK];
byte row_run[NK];         /* run_id of the holder: 1+c */
/* fence_token: the ghost last_grant[k] (nothing in this mode reads it) */
bool row_inf[NK];         /* expires_at = 'infinity': a heartbeat row */
byte row_exp[NK];         /* expires_at when finite (0 when infinite) */
bool row_rel[NK];         /* released_at IS NOT NULL */
byte row_mgr[NK];         /* manager_id: an epoch, 0 = NULL */
byte row_at[NK];          /* acquired_at of a heartbeat row (0 for a finite one:
                           * nothing reads it there) */
#ifdef PARK
/* parked_run_id = run_id (migration 0012). The run identity of a grant is
 * its token here (run_id and token are 1:1 per grant; row_run names the
 * Manager whose lease the row is, for the displaced records): row_tok. A
 * grant rewrites the run, so the mark no longer matches: WRITE_ROW clears
 * it. A parked row has row_run 0 (no Manager's lease), a finite expiry
 * and no manager_id. */
bool row_park[NK];
byte row_tok[NK];
#ifndef IDLE
#define IDLE    1         /* Lease.Park's idle bound, ticks */
#endif
#define PK      0         /* the key whose leases are parked and resumed (the
                           * other key keeps the plain heartbeat grants) */
byte pk[NC*NK];           /* the run (token) Manager c parked on key k, kept by
                           * its client to resume; 0 = none */
#define PARKED_CLEAR(k) row_park[k] = 0
#else
#define PARKED_CLEAR(k) skip
#endif

/* ---- fencekit_managers: one row per epoch (manager_id 1..NE) ------------ */
byte m_exp[NE+1];         /* expires_at; 0 = no row (not yet inserted, or deleted) */
byte epochs;              /* epochs started so far: the next manager_id is epochs+1 */

/* ---- fencekit_displaced, as the heartbeat statement reads it ------------- */
bool disp[NC*NK];         /* c's run on key k was displaced (takeover) and c's
                           * epoch has not read it yet */

/* ---- the Managers' state the Clock normalises ---------------------------- */
byte ep[NC];              /* current epoch, 0 = none: its trust ended, or never began */
byte trust[NC];           /* the epoch's local trust deadline; 0 iff ep == 0 */
byte hsent[NC];           /* heartbeat renewal in flight: sent_at + 1; 0 = none */
byte hat[NC];             /* its statement found the row at hat-1 and holds the
                           * row lock until it commits; 0 = not there yet */
byte hep[NC];             /* the epoch the renewal in flight names */
byte ctok[NC*NK];         /* token of c's lease on key k; 0 = none */

#ifdef HB_GUARD
/* ---- the guarded resource, one per key (memguard) ------------------------ */
byte mem_mark[NK];
byte hi[NK];              /* ghost: highest token the resource accepted */
#define HELD(tk) tk
#else
#define HELD(tk) 1        /* without a resource the token held is not needed */
#endif

/* ---- ghosts (read only by assertions) ------------------------------------ */
byte last_grant[NK];      /* token of the latest grant of k */
byte gown[NK];            /* epoch of the latest grant of k; 0 after its release
                           * (and while it is parked) */
#ifdef PARK
byte gpexp[NK];           /* the parked expiry of k's latest grant while parked; 0 otherwise */
#define PARKED_LIVE(k) (gpexp[k] > now)
#else
#define PARKED_LIVE(k) 0
#endif
#ifdef ROLLING
#define OLDEP   (NE+1)    /* the ghosts' index for the v0.1.0 Manager's run */
#define NG      (NE+1)
#else
#define NG      NE
#endif
byte gexp[NG+1];          /* expiry the database last committed for epoch e; 0 once passed */
bool lapsed[NG+1];        /* epoch e's expiry has passed (it may not come back) */

#ifdef ROLLING
/* the v0.1.0 Manager (NC-1): one lease at a time, renewed per lease */
#define OLD     (NC-1)
byte otrust;              /* its lease's trust deadline; 0 once passed */
byte ok_;                 /* key of its lease + 1; 0 = none */
byte orsent;              /* per-lease renewal in flight: sent_at + 1 */
bool otaken;              /* ghost: its run was taken over (it may not know yet) */
#define NHB     (NC-1)    /* Managers 0..NHB-1 run the heartbeat */
#else
#define NHB     NC
#endif

/* nextval('fencekit_token_seq'); at the token bound x = 0: the statement
 * fails and writes nothing (the search is cut there). */
inline nextval(x) {
	if
	:: seq < MAXTOK -> seq++; x = seq
	:: else -> x = 0
	fi
}

/* A write is accepted by key k's resource (P1). */
inline accepted(k, tk) {
	assert(tk >= hi[k]);      /* P1: no write accepted after a higher token */
	hi[k] = tk
}

/* A grant of key k committed (P2). e: the epoch the row names (OLDEP: the
 * v0.1.0 Manager's per-lease run). */
inline granted(k, tk, e) {
	assert(tk > last_grant[k]);   /* P2: every grant above every earlier one */
	last_grant[k] = tk;
	gown[k] = e
}

/* P3 at a non-takeover grant of key k to c: the run it replaces is no
 * longer live in the database (its epoch's committed expiry has passed, or
 * it was released), and no other Manager still holds a lease on k that it
 * has not been told was taken over. */
#ifdef ROLLING
#define P3_OLD(c, k) assert(c == OLD || ok_ != (k)+1 || otaken)      /* P3h */
#else
#define P3_OLD(c, k) skip
#endif
inline no_other_holder(c, k) {
#ifndef NO_P3DB
	assert(gown[k] == 0 || gexp[gown[k]] == 0);                     /* P3 */
	assert(!PARKED_LIVE(k));                                        /* P3: a parked grant is live until its expiry */
#endif
	assert(c == 0 || ctok[K(0, k)] == 0 || disp[K(0, k)]);          /* P3h */
	assert(c == 1 || ctok[K(1, k)] == 0 || disp[K(1, k)]);          /* P3h */
	P3_OLD(c, k)
}

/* live(row, t): released_at IS NULL AND ((expires_at <> 'infinity' AND
 * expires_at > t) OR (expires_at = 'infinity' AND EXISTS (manager row of
 * row.manager_id with expires_at > t))). The manager row is read in the
 * statement's snapshot: snap has bit e set iff epoch e's committed row had
 * expires_at > t when the statement started. ON CONFLICT, though, locks and
 * judges the held row's latest version, which may be a grant committed
 * after that snapshot under an epoch the snapshot does not have yet; so a
 * heartbeat row granted at or after the statement's own start counts as
 * live (held.acquired_at >= EXCLUDED.acquired_at). BROKEN_HB_SNAPSHOT
 * leaves that out. */
#ifdef BROKEN_HB_SNAPSHOT
#define NEWER(k, t) 0
#else
#define NEWER(k, t) (row_at[k] >= (t))
#endif
/* a heartbeat renewal between its check and its commit holds the row lock */
#define MLOCKED(e) ((hat[0] != 0 && hep[0] == (e)) || (hat[1] != 0 && hep[1] == (e)))
#ifdef HB_LOCKED_READ
/* The manager row read with a scalar sub-select FOR SHARE: it waits for a
 * renewal in flight on that row to commit and judges the latest version of
 * a row its snapshot has (a row inserted after the snapshot it does not
 * see at all). */
#define MGR_LIVE(k, t, snap) (((snap >> row_mgr[k]) & 1) && m_exp[row_mgr[k]] > (t))
#define MGR_WAIT(k) (row_exists[k] && row_inf[k] && MLOCKED(row_mgr[k]))
#else
#define MGR_LIVE(k, t, snap) ((snap >> row_mgr[k]) & 1)
#define MGR_WAIT(k) 0
#endif
#define LIVE(k, t, snap) (!row_rel[k] && \
	((row_inf[k] && (MGR_LIVE(k, t, snap) || NEWER(k, t))) || (!row_inf[k] && row_exp[k] > t)))
/* the snapshot: plain read, epochs whose committed row has expires_at > t;
 * locked read, epochs whose row exists (the sub-select sees no other) */
#ifdef HB_LOCKED_READ
#define SNAPBIT(e) ((m_exp[e] != 0) << e)
#else
#define SNAPBIT(e) ((m_exp[e] > now) << e)
#endif
#if NE == 2
#define SNAPSHOT(s) s = SNAPBIT(1) | SNAPBIT(2)
#elif NE == 3
#define SNAPSHOT(s) s = SNAPBIT(1) | SNAPBIT(2) | SNAPBIT(3)
#elif NE == 4
#define SNAPSHOT(s) s = SNAPBIT(1) | SNAPBIT(2) | SNAPBIT(3) | SNAPBIT(4)
#else
#error "SNAPSHOT is written for NE in 2..4"
#endif

/* The epoch ends at the Manager: every lease of it ends (ErrLost or
 * ErrTrustExpired); the next Acquire starts a new epoch. */
#define END_EPOCH(c) trust[c] = 0; ep[c] = 0; \
	ctok[K(c, 0)] = 0; ctok[K(c, 1)] = 0; disp[K(c, 0)] = 0; disp[K(c, 1)] = 0

active proctype Clock() {
	byte i;
end:	do
	:: now < TMAX ->
		d_step {
			now++;
			for (i : 1 .. NG) {
				/* epoch i expired in the database: forget when */
				if
				:: gexp[i] != 0 && gexp[i] <= now -> gexp[i] = 0; lapsed[i] = 1
				:: else -> skip
				fi
			};
			for (i : 0 .. NHB-1) {
				/* i's epoch trust deadline passed (its local clock may be
				 * slow by DRIFT): the trust timer ends every lease of it */
				if
				:: trust[i] != 0 && now >= trust[i] + DRIFT -> END_EPOCH(i)
				:: else -> skip
				fi
			};
#ifdef ROLLING
			if
			:: otrust != 0 && now >= otrust + DRIFT -> otrust = 0; ok_ = 0
			:: else -> skip
			fi;
#endif
			i = 0
		}
	od
}

#ifndef NO_JANITOR
/* Janitor.Sweep: lease rows dead for longer than the retention (a finite
 * row since its expires_at; a heartbeat row since its manager's expiry, or
 * forever if the manager row is gone), then manager rows expired for longer
 * than the retention and not locked by a renewal (SKIP LOCKED). Each one
 * statement. */
active proctype Janitor() {
	byte i;
end:	do
	:: d_step { now > RET ->
		for (i : 0 .. NK-1) {
			if
			:: row_exists[i] && ((!row_inf[i] && row_exp[i] + RET < now) ||
			                     (row_inf[i] && (m_exp[row_mgr[i]] == 0 || m_exp[row_mgr[i]] + RET < now))) ->
				row_exists[i] = 0; row_run[i] = 0; row_inf[i] = 0;
				row_exp[i] = 0; row_rel[i] = 0; row_mgr[i] = 0; row_at[i] = 0
#ifdef PARK
				; row_park[i] = 0; row_tok[i] = 0
#endif
			:: else -> skip
			fi
		};
		i = 0 }
	:: d_step { now > RET ->
		for (i : 1 .. NE) {
			if
			:: m_exp[i] != 0 && m_exp[i] + RET < now && !MLOCKED(i) -> m_exp[i] = 0
			:: else -> skip
			fi
		};
		i = 0 }
	od
}
#endif

#define rid (c+1)
#ifdef BROKEN_HB_IGNORED
#define WRITE_ROW0(k, tk, e) row_exists[k] = 1; row_run[k] = rid; \
	row_inf[k] = 0; row_exp[k] = m_exp[e]; row_rel[k] = 0; row_mgr[k] = e; row_at[k] = 0
#else
#define WRITE_ROW0(k, tk, e) row_exists[k] = 1; row_run[k] = rid; \
	row_inf[k] = 1; row_exp[k] = 0; row_rel[k] = 0; row_mgr[k] = e; row_at[k] = t
#endif
#ifdef PARK
#define WRITE_ROW(k, tk, e) WRITE_ROW0(k, tk, e); row_tok[k] = tk; row_park[k] = 0; gpexp[k] = 0
#else
#define WRITE_ROW(k, tk, e) WRITE_ROW0(k, tk, e)
#endif

/* Manager 0 does everything; Manager 1 (unless HB_SYMMETRIC) is a
 * contender that starts epochs, acquires, holds and writes but neither
 * renews its heartbeat nor releases (its epochs end by TTL): the search
 * stays small enough to be exhaustive. */
#ifdef HB_SYMMETRIC
#define FULL(c) 1
#else
#define FULL(c) (c == 0)
#endif

/* A heartbeat Manager (lease.Manager with the heartbeat renewal). Every
 * option of the loop is one of its goroutines taking a step; at most one
 * acquire and one heartbeat renewal in flight. */
proctype Manager(byte c) {
	byte k, t, v, tk, ae, snap;   /* the acquire in flight (aq) */
	bool aq;
#ifdef PARK
	byte rk, rt, re, rtok, ro;    /* the resume in flight (rq): key, statement time,
	                               * epoch named, the run (token), its parker */
	bool rq;
#endif

end_idle:
	do
	/* ---- a guarded write: the trust check passes (Lease.Context() not
	 * cancelled), then (HB_GUARD) memguard.Fence decides and writes under
	 * its lock. Without HB_GUARD the write is its start (P4) and ctok
	 * records only that c holds the key. */
	:: atomic { ctok[K(c, 0)] != 0 ->
		assert(now < gexp[ep[c]])    /* P4: the writer's epoch is unexpired in the database */
#ifdef HB_GUARD
		; if
		:: ctok[K(c, 0)] >= mem_mark[0] -> accepted(0, ctok[K(c, 0)]); mem_mark[0] = ctok[K(c, 0)]
		:: else -> skip              /* *fence.StaleError */
		fi
#endif
		}
	:: atomic { ctok[K(c, 1)] != 0 ->
		assert(now < gexp[ep[c]])    /* P4 */
#ifdef HB_GUARD
		; if
		:: ctok[K(c, 1)] >= mem_mark[1] -> accepted(1, ctok[K(c, 1)]); mem_mark[1] = ctok[K(c, 1)]
		:: else -> skip
		fi
#endif
		}

	/* ---- a new epoch: INSERT INTO fencekit_managers (at first need) ------ */
	:: atomic { ep[c] == 0 && epochs < NE ->
		epochs++; ep[c] = epochs;
		m_exp[epochs] = now + TTL; gexp[epochs] = now + TTL;
		trust[c] = now + TTL - MARGIN }

	/* ---- the heartbeat: UPDATE fencekit_managers SET expires_at = t + ttl
	 * WHERE manager_id = $1 AND expires_at > t, t = clock_timestamp() ---- */
	:: atomic { FULL(c) && ep[c] != 0 && hsent[c] == 0 -> hsent[c] = now + 1; hep[c] = ep[c] }   /* sent */
	:: atomic { hsent[c] != 0 && hat[c] == 0 ->   /* the statement finds the row, at now */
		if
#ifdef BROKEN_HB_REVIVE
		:: m_exp[hep[c]] != 0 ->
#else
		:: m_exp[hep[c]] > now ->
#endif
#ifndef NO_P5
			assert(!lapsed[hep[c]]);    /* P5: an expired epoch stays expired */
#endif
			hat[c] = now + 1            /* row locked until the commit */
		:: else ->                      /* zero rows: refused: ErrLost for every
			                             * lease of the epoch (its trust timer has
			                             * fired already unless the clock drifts) */
			if :: hep[c] == ep[c] -> END_EPOCH(c) :: else -> skip fi;
			hsent[c] = 0; hep[c] = 0
		fi }
	:: atomic { hat[c] != 0 ->        /* it commits, possibly much later */
		m_exp[hep[c]] = hat[c] - 1 + TTL;
		if
		:: m_exp[hep[c]] > now -> gexp[hep[c]] = m_exp[hep[c]]
		:: else -> gexp[hep[c]] = 0; lapsed[hep[c]] = 1
		fi;
		if
		:: hep[c] == ep[c] ->       /* the reply, while the epoch is trusted */
			if
			:: hsent[c] - 1 + TTL - MARGIN > trust[c] -> trust[c] = hsent[c] - 1 + TTL - MARGIN
			:: else -> skip
			fi;
			/* the same statement returns the epoch's displaced runs */
			if :: disp[K(c, 0)] -> ctok[K(c, 0)] = 0; disp[K(c, 0)] = 0 :: else -> skip fi;
			if :: disp[K(c, 1)] -> ctok[K(c, 1)] = 0; disp[K(c, 1)] = 0 :: else -> skip fi
		:: skip                     /* reply lost, or the epoch already ended */
		fi;
		hsent[c] = 0; hat[c] = 0; hep[c] = 0 }

	/* ---- Acquire / Takeover of key k: one statement, two steps --------- */
	/* A1: the statement starts: t = statement_timestamp(), its snapshot
	 * (snap), the VALUES-side token; the Manager names its epoch. */
	:: atomic { ep[c] != 0 && !aq && seq < MAXTOK && (ctok[K(c, 0)] == 0 || ctok[K(c, 1)] == 0) ->
		if
		:: ctok[K(c, 0)] == 0 -> k = 0
		:: ctok[K(c, 1)] == 0 -> k = 1
		fi;
		t = now; nextval(v); ae = ep[c]; SNAPSHOT(snap); aq = 1 }
	/* A2: the insert, or on conflict the row lock and WHERE NOT live(held)
	 * (the held row's latest version; the manager row as of snap) */
	:: atomic { aq && !MGR_WAIT(k) ->
		tk = 0;
		if
		:: now > t + SB -> skip                     /* statement_timeout */
		:: else ->
			if
			:: !row_exists[k] ->                    /* insert: the VALUES-side token */
				tk = v; no_other_holder(c, k);
				WRITE_ROW(k, tk, ae); granted(k, tk, ae)
			:: row_exists[k] && !LIVE(k, t, snap) -> /* DO UPDATE: token drawn under the lock */
				nextval(tk);
				if
				:: tk != 0 -> no_other_holder(c, k); WRITE_ROW(k, tk, ae); granted(k, tk, ae)
				:: else -> skip
				fi
#ifdef TAKEOVER
			:: row_exists[k] && LIVE(k, t, snap) ->  /* takeover: DO UPDATE without WHERE */
				nextval(tk);
				if
				:: tk != 0 ->
					/* displaced: recorded with held.manager_id in fencekit_displaced */
					if
					:: row_run[k] != rid && row_run[k] != 0 && row_run[k] <= NHB -> disp[K(row_run[k]-1, k)] = 1
					:: else -> skip
					fi;
#ifdef ROLLING
					if :: row_run[k] == OLD+1 && ok_ == k+1 -> otaken = 1 :: else -> skip fi;
#endif
					WRITE_ROW(k, tk, ae); granted(k, tk, ae)
				:: else -> skip
				fi
#endif
			:: row_exists[k] && LIVE(k, t, snap) -> skip   /* refused: held */
			fi
		fi;
		if
		:: tk != 0 && ae == ep[c] ->        /* the reply: a lease under the epoch */
			ctok[K(c, k)] = HELD(tk); disp[K(c, k)] = 0
#ifdef BROKEN_HB_GRANT_TRUST
			; if :: t + TTL - MARGIN > trust[c] -> trust[c] = t + TTL - MARGIN :: else -> skip fi
#endif
		:: else -> skip     /* refused, timed out, or granted under an epoch whose
		                     * trust already ended: the lease ends at once */
		fi;
		aq = 0; k = 0; t = 0; v = 0; tk = 0; ae = 0; snap = 0 }

	/* ---- Lease.Release: by run_id (either kind of row) ------------------- */
	:: atomic { FULL(c) && (ctok[K(c, 0)] != 0 || ctok[K(c, 1)] != 0) ->
		if
		:: ctok[K(c, 0)] != 0 -> k = 0
		:: ctok[K(c, 1)] != 0 -> k = 1
		fi;
		ctok[K(c, k)] = 0; disp[K(c, k)] = 0;
		if
		:: row_exists[k] && row_run[k] == rid && !row_rel[k] && (row_inf[k] || row_exp[k] > now) ->
			row_rel[k] = 1; row_inf[k] = 0; row_exp[k] = now; row_at[k] = 0; gown[k] = 0
		:: else -> skip
		fi;
		k = 0 }
#ifdef PARK
	/* ---- Lease.Park of c's lease on key k: the Lease leaves the Manager
	 * (no more writes, renewals or releases of it) before the statement;
	 * one UPDATE: WHERE run_id AND NOT parked AND manager_id = the lease's
	 * epoch AND live(row, now) SET expires_at = now + idle, manager_id =
	 * NULL, parked_run_id = run_id. The client keeps the run to resume. */
	:: atomic { FULL(c) && ctok[K(c, PK)] != 0 ->
		k = PK;
		tk = ctok[K(c, k)]; ctok[K(c, k)] = 0; disp[K(c, k)] = 0;
		if
		:: row_exists[k] && row_run[k] == rid && !row_park[k] && row_mgr[k] == ep[c] &&
		   !row_rel[k] && row_inf[k] && m_exp[ep[c]] > now ->
			row_inf[k] = 0; row_exp[k] = now + IDLE; row_mgr[k] = 0; row_at[k] = 0;
			row_park[k] = 1; row_run[k] = 0;
			gown[k] = 0; gpexp[k] = now + IDLE;
			pk[K(c, k)] = row_tok[k]
		:: else -> skip             /* ErrLost: the run no longer holds its row */
		fi;
		k = 0; tk = 0 }

	/* ---- Manager.Resume of the run o parked on key k: one UPDATE in two
	 * steps, like a grant. R1: t = statement_timestamp(), the epoch named. */
	:: atomic { ep[c] != 0 && !rq && (pk[K(0, PK)] != 0 || pk[K(1, PK)] != 0) ->
		rk = PK;
		if
		:: pk[K(0, PK)] != 0 -> ro = 0
		:: pk[K(1, PK)] != 0 -> ro = 1
		fi;
		rtok = pk[K(ro, rk)];
		if :: ctok[K(c, rk)] == 0 -> rt = now; re = ep[c]; rq = 1
		   :: else -> ro = 0; rk = 0; rtok = 0    /* c holds the key: no resume */
		fi }
	/* R2: under the row lock, WHERE run_id = $3 AND parked AND NOT released
	 * AND expires_at > t AND the named epoch live at t; SET manager_id =
	 * epoch, expires_at = 'infinity', acquired_at = t, parked_run_id = NULL;
	 * run and token unchanged. The client forgets the run once resumed or
	 * refused as lost (a refusal as active: it may retry). */
	:: atomic { rq ->
		if
		:: now > rt + SB -> skip                   /* statement_timeout */
#ifdef BROKEN_RESUME_ANY_RUN
		:: row_exists[rk] && row_park[rk] &&
#else
		:: row_exists[rk] && row_park[rk] && row_tok[rk] == rtok &&
#endif
		   !row_rel[rk] && row_exp[rk] > rt && m_exp[re] > rt ->
			assert(rtok == last_grant[rk]);     /* P7: Resume continues the key's latest grant */
			assert(c == 0 || ctok[K(0, rk)] == 0 || disp[K(0, rk)]);   /* P3h */
			assert(c == 1 || ctok[K(1, rk)] == 0 || disp[K(1, rk)]);   /* P3h */
			row_inf[rk] = 1; row_exp[rk] = 0; row_mgr[rk] = re; row_at[rk] = rt;
			row_park[rk] = 0; row_run[rk] = rid;
			gown[rk] = re; gpexp[rk] = 0;
			pk[K(ro, rk)] = 0;
			if
			:: re == ep[c] -> ctok[K(c, rk)] = HELD(rtok); disp[K(c, rk)] = 0   /* the reply */
			:: else -> skip      /* the epoch ended meanwhile: the lease ends at once */
			fi
		:: else ->
			if
			:: row_exists[rk] && row_tok[rk] == rtok && !row_rel[rk] && (row_inf[rk] || row_exp[rk] > now) -> skip   /* ErrRunActive */
			:: else -> pk[K(ro, rk)] = 0    /* ErrLost: the run is gone */
			fi
		fi;
		rq = 0; rk = 0; rt = 0; re = 0; rtok = 0; ro = 0 }
#endif

	od
}

#ifdef ROLLING
/* A Manager of the previous release (v0.1.0 statements, which know nothing
 * of manager_id): one lease at a time, per-lease expiry and renewal. In
 * SQL, expires_at > t is true for 'infinity' and expires_at <= t false. */
#undef rid
#define rid (OLD+1)
#define EXP_GT(k, x) (row_inf[k] || row_exp[k] > (x))
#define OLD_IDLE { otrust = 0; ok_ = 0; orsent = 0; gexp[OLDEP] = 0; lapsed[OLDEP] = 0; otaken = 0; k = 0; tk = 0; goto end_idle }
proctype OldManager() {
	byte k, t, v, tk;
end_idle:
	/* acquire: DO UPDATE SET (manager_id untouched) WHERE held.expires_at
	 * <= EXCLUDED.acquired_at */
	atomic { seq < MAXTOK ->
		if :: k = 0 :: k = 1 fi;
		t = now; nextval(v) };
	atomic {
		tk = 0;
		if
		:: now > t + SB -> skip
		:: else ->
			if
			:: !row_exists[k] ->
				tk = v; no_other_holder(OLD, k);
				row_exists[k] = 1; row_run[k] = rid; row_inf[k] = 0;
				row_exp[k] = t + TTL; row_rel[k] = 0; row_mgr[k] = 0; row_at[k] = 0;
				granted(k, tk, OLDEP)
			:: row_exists[k] && !EXP_GT(k, t) ->
				nextval(tk);
				if
				:: tk != 0 ->
					no_other_holder(OLD, k);
					row_run[k] = rid; row_exp[k] = t + TTL; row_rel[k] = 0;
					granted(k, tk, OLDEP)     /* manager_id left as it was; expires_at finite */
				:: else -> skip
				fi
#ifdef TAKEOVER
			:: row_exists[k] && EXP_GT(k, t) ->      /* v0.1.0 takeover: no WHERE */
				nextval(tk);
				if
				:: tk != 0 ->
					/* displaced_run_id recorded without a manager_id: the
					 * heartbeat statement does not return it (disp not set);
					 * a displaced heartbeat run learns through the listener
					 * or not at all, and its guards refuse it */
					row_run[k] = rid; row_inf[k] = 0; row_exp[k] = t + TTL; row_rel[k] = 0; row_at[k] = 0;
					granted(k, tk, OLDEP)
				:: else -> skip
				fi
#endif
			:: row_exists[k] && EXP_GT(k, t) -> skip  /* refused: held (always, for a heartbeat row) */
			fi
		fi;
		if
		:: tk != 0 -> ok_ = k + 1; gexp[OLDEP] = t + TTL; lapsed[OLDEP] = 0; otaken = 0; otrust = t + TTL - MARGIN
		:: else -> k = 0
		fi;
		t = 0; v = 0;
		if :: ok_ == 0 -> OLD_IDLE :: else -> skip fi };
	do
	:: atomic { otrust != 0 ->
		assert(now < gexp[OLDEP])      /* P4 */
#ifdef HB_GUARD
		; if
		:: tk >= mem_mark[k] -> accepted(k, tk); mem_mark[k] = tk
		:: else -> skip
		fi
#endif
		}
	:: atomic { otrust != 0 && orsent == 0 -> orsent = now + 1 }
	:: atomic { orsent != 0 ->        /* renew: WHERE run_id AND released_at IS NULL AND expires_at > now */
		if
		:: row_exists[k] && row_run[k] == rid && !row_rel[k] && EXP_GT(k, now) ->
#ifndef NO_P5
			assert(!lapsed[OLDEP]);   /* P5 */
#endif
			row_exp[k] = now + TTL; gexp[OLDEP] = row_exp[k];
			if
			:: otrust != 0 && orsent - 1 + TTL - MARGIN > otrust -> otrust = orsent - 1 + TTL - MARGIN
			:: else -> skip
			fi
		:: else -> otrust = 0; ok_ = 0    /* ErrLost */
		fi;
		orsent = 0 }
	:: atomic {                       /* release, or give up (the row expires by TTL) */
		if
		:: row_exists[k] && row_run[k] == rid && !row_rel[k] && EXP_GT(k, now) ->
			row_rel[k] = 1; row_inf[k] = 0; row_exp[k] = now; row_at[k] = 0; gown[k] = 0
		:: skip
		fi;
		OLD_IDLE }
	:: atomic { ok_ == 0 -> OLD_IDLE }
	od
}
#endif

init {
	atomic {
#ifdef ROLLING
		run Manager(0);
		run OldManager()
#else
		run Manager(0);
		run Manager(1)
#endif
	}
}
