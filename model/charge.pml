/*
 * charge.pml: the charge protocol of one idempotency key, checked by SPIN
 * over every interleaving of two client workers, the reconciler, a PSP that
 * may lose, delay or refuse charges, the database's clock and crashes.
 *
 * model/README.md says what each property means, which chaos invariant it
 * matches, how the world is bounded and how to run it. Every atomic step
 * below names the Go function and the SQL it stands for, so that a change
 * to the flow shows where the model must change too.
 *
 * Clock. One clock, the database's NOW(6). Time is kept RELATIVE: every
 * stored time is "ticks from now", and the Clock process moves them all one
 * tick into the past at once. A time far enough in the past to decide no
 * comparison any more is clamped (each variable has its own floor, see
 * Clock), so the state space is finite although the clock runs for ever:
 * that is what lets liveness (p5) be checked without a horizon artefact.
 *
 * Steps. One atomic step per SQL transaction or compare-and-set. Where a
 * step only receives something (the PSP's answer, a read whose result the
 * following compare-and-set checks again) it is joined to the write it
 * leads to: the model lets the answer arrive at any moment, so nothing is
 * lost. Where the input of a write can go stale in between (a lookup's
 * "not found" before ArmCharge, before recording not_found_at, before
 * settling failed; the deadline check before the charge leaves), the two
 * are separate steps.
 */

/* ---- configuration (spin -DNAME=value) ---------------------------------- */
#ifndef AUTH
#define AUTH 1          /* the PSP's "not found" is authoritative */
#endif
#ifndef DEDUPE
#define DEDUPE 1        /* the PSP deduplicates on the order id */
#endif
#ifndef DW
#define DW 0            /* its dedupe window in ticks; 0 = for ever */
#endif
#ifndef ANYNF
#define ANYNF 1         /* resume's dedupe rule takes any not-found, authoritative or not (MayChargeAgain) */
#endif
#ifndef LMARGIN
#define LMARGIN T       /* resume's dedupe rule: DB now + LMARGIN must be inside the window (MayChargeAgain) */
#endif
#ifndef DWGUARD
#define DWGUARD 0       /* ArmCharge re-checks the dedupe rule, leaving room for the charge to land */
#endif
#ifndef PAUSE
#define PAUSE HALF      /* longest stall between the deadline check and the write */
#endif
#ifndef REQS1
#define REQS1 1         /* requests client 1 sends with the key */
#endif
#ifndef REQS2
#define REQS2 2         /* requests client 2 sends with it: a retry (late or not) and its retry */
#endif
#ifndef CRASH
#define CRASH 0         /* a worker may die at any step */
#endif
#ifndef RCRASH
#define RCRASH 0        /* reconciler crashes; each restarts it at its loop */
#endif
#ifndef DECLINES
#define DECLINES 0      /* the PSP may decline (else every charge it makes succeeds) */
#endif
#ifndef REJECTS
#define REJECTS 0       /* the PSP may refuse one send with a permanent request error */
#endif
#ifndef REJECT_FIX
#define REJECT_FIX 0    /* that refusal settles failed only when no other send was authorised */
#endif
#ifndef ARMFAIL
#define ARMFAIL 0       /* ArmCharge may fail without landing; the worker then releases */
#endif
#ifndef ARMFAIL_FIX
#define ARMFAIL_FIX 0   /* that release does not count the send as not sent */
#endif
#ifndef FAILOVER
#define FAILOVER 0      /* the database may lose its last commit once, if that commit granted a lease */
#endif
#ifndef SKEW
#define SKEW 3          /* clock error of the skewed actor in the MUT_SKEW_* mutants */
#endif

#define L       3       /* lease (GATEWAY_LEASE) */
#define T       2       /* PSP call timeout (GATEWAY_PSP_TIMEOUT) */
#define HALF    1       /* T/2: the least time left to start a charge */
#define CW      2       /* creation window: a charge lands less than CW ticks after it was sent */
#define MAXATT  2       /* reconciler passes that learn nothing before requires_review */
#define BACKOFF 1       /* reconciler back-off after such a pass */
#define NULLT   99      /* NULL time */
#if DW > 0
#define DWC DW
#else
#define DWC 0
#endif
#define DLMIN (HALF - PAUSE - 1)   /* a deadline this far gone decides nothing more */

/* key row states; payment statuses (and the PSP's result); PSP request slots */
#define K_NONE   0
#define K_INPROG 1
#define K_DONE   2
#define P_PROC   1
#define P_SUCC   2      /* answered 201 */
#define P_DECL   3      /* answered 402, declined */
#define P_FAIL   4      /* answered 402, failed */
#define P_REV    5      /* answered 202, requires_review */
#define S_FREE   0
#define S_PEND   1      /* on the wire: the PSP may still apply it */
#define S_APPL   2      /* applied; the answer waits for its sender */
#define S_DROP   3      /* certainly never applied: NotProcessed */
#define S_REJ    4      /* certainly never applied: a permanent request error */
#define REC      3      /* the reconciler's holder id; workers are 1 and 2 */
#define NSLOT    4

/* ---- shared state: the rows --------------------------------------------- */
/* idempotency_keys */
byte  kstate;           /* state */
byte  ktok;             /* lease_version, the fencing token */
short klu;              /* locked_until */
short kmcu;             /* may_send_until */
short kra;              /* reconcile_after */
byte  kca;              /* send_attempts */
byte  kcns;             /* sends_not_sent */
short knf = NULLT;      /* not_found_at */
byte  katt;             /* reconcile_attempts */
byte  kresp;            /* the stored response */
/* payments */
byte  pstatus;          /* status */
short pcreated;         /* created_at: only its age matters (dedupe window) */

/* ---- the PSP's ledger for the order id ----------------------------------- */
byte  charges;          /* charges that moved money */
byte  pres;             /* their result, P_SUCC or P_DECL */
short first_at = NULLT; /* when the order id entered the PSP's dedupe memory */
byte  slot[NSLOT];      /* charge requests on the wire */
short sent[NSLOT];      /* when each was sent */
bit   orphan[NSLOT];    /* its sender stopped waiting (timeout, crash) */

/* ---- per actor (global so that the clock can age the deadlines) ---------- */
byte  tok[3];           /* the token a worker holds (1, 2); 0 none */
short dl[3] = DLMIN;    /* a worker's local charge deadline (monotonic clock) */
bit   late[3];          /* at its TakeOver, db now > may_send_until + CW */
byte  myslot[3];
byte  reqs[3];
bit   took[3];          /* this request took the lease over once already */
byte  rtok;             /* the reconciler's token */

/* ---- ghosts: not in any table; they state the properties ---------------- */
byte  holder;           /* who the lease was last granted to */
bit   a201, a402d, a402f, a202;   /* answers some client received */
bit   undo_ok;          /* FAILOVER: the last commit was a grant, and may be lost */
bit   failed_over;
byte  undo_tok, undo_holder;
short undo_klu, undo_kra;
hidden byte nt;         /* scratch for fresh() */
/* always 0: they only put the property's name into pan's error message */
bit   p1_once, p2_agree, p3_fence, p4_answers;

/* ---- properties ------------------------------------------------------------ */
#define QUIESCENT (kstate == K_DONE && slot[0] != S_PEND && slot[1] != S_PEND && \
                   slot[2] != S_PEND && slot[3] != S_PEND)
/* p2: once quiescent, the recorded status agrees with the PSP (review is "we don't know") */
#define P2 (p2_agree || !QUIESCENT || pstatus == P_REV || \
            (((pstatus == P_SUCC) == (charges > 0 && pres == P_SUCC)) && \
             ((pstatus == P_DECL) == (charges > 0 && pres == P_DECL)) && \
             ((pstatus == P_FAIL) == (charges == 0))))
/* p4: no answer given is contradicted later: a 201 stays succeeded, a 402
 * stays what it said, a 402 failed never hides a charge (checked at every
 * step, also while charges are still landing) */
#define P4 (p4_answers || ((!a201 || pstatus == P_SUCC) && (!a402d || pstatus == P_DECL) && \
                      (!a402f || (pstatus == P_FAIL && charges == 0)) && (!a202 || pstatus == P_REV)))
#define CHECK assert(P2); assert(P4)

/* ---- helpers --------------------------------------------------------------- */
#define MAX(a, b) ((a) > (b) -> (a) : (b))
#define DEC(v, lo) if :: v > (lo) -> v = v - 1 :: else -> skip fi
#define DECN(v, lo) if :: v != NULLT && v > (lo) -> v = v - 1 :: else -> skip fi
#define DECS(i) if :: slot[i] == S_PEND -> sent[i] = sent[i] - 1 :: else -> skip fi
/* the clock may not move a pending charge past its creation window */
#define INWIN(i) (slot[i] != S_PEND || sent[i] > 1 - CW)

/* A new token differs from every token anyone holds: that is what "counter
 * in the high bits + 32 random bits" buys (a grant lost in a failover is
 * never handed out again). MUT_TOKEN_COUNTER: a counter alone. */
inline fresh(t) {
#ifdef MUT_TOKEN_COUNTER
  t = ktok + 1
#else
  d_step {
    nt = 1;
    do
    :: (nt == ktok || nt == tok[1] || nt == tok[2] || nt == rtok || nt == undo_tok) -> nt++
    :: else -> break
    od;
    t = nt; nt = 0
  }
#endif
}

/* Every lease grant (TakeOver, ClaimStale) remembers what it overwrote, so
 * that the FAILOVER fault can lose exactly that commit. */
inline grant(t, who) {
  undo_ok = FAILOVER && !failed_over;
  if
  :: undo_ok -> undo_tok = ktok; undo_holder = holder; undo_klu = klu; undo_kra = kra
  :: else -> skip
  fi;
  fresh(t); ktok = t; holder = who
}

/* p3: a fenced write is applied only for the actor the lease was last granted to */
#define FENCED_BY(t) (kstate == K_INPROG && ktok == (t))
#define APPLIED_BY(who) assert(p3_fence || holder == (who)); undo_ok = 0

inline answer(st) {
  if
  :: st == P_SUCC -> a201 = 1
  :: st == P_DECL -> a402d = 1
  :: st == P_FAIL -> a402f = 1
  :: st == P_REV  -> a202 = 1
  fi
}

/* The key completes: state COMPLETED, the payment's status and the stored
 * response. Nothing reads the lease columns of a completed key, so they are
 * reset (one completed state instead of many). */
inline complete(st) {
  kstate = K_DONE; pstatus = st; kresp = st;
  klu = 0; kra = 0; kmcu = -CW - 1; knf = NULLT; kca = 0; kcns = 0; katt = 0
}

inline free_slot(i) { slot[i] = S_FREE; sent[i] = 0; orphan[i] = 0 }

inline new_slot(i) {
  if
  :: slot[0] == S_FREE -> i = 0
  :: else -> if
             :: slot[1] == S_FREE -> i = 1
             :: else -> if :: slot[2] == S_FREE -> i = 2 :: else -> i = 3 fi
             fi
  fi;
  assert(slot[i] == S_FREE);
  slot[i] = S_PEND; sent[i] = 0
}

/* ---- the PSP --------------------------------------------------------------- */
/* Charge(order): lands within the creation window of its send, deduplicated
 * on the order id while the id is in the PSP's dedupe memory; or certainly
 * never lands (NotProcessed, or a permanent request error). */
inline apply(i) {
  if
  :: charges > 0 && DEDUPE && (DW == 0 || first_at > -DWC) -> skip   /* a repeat: the first charge */
  :: else ->
       charges++;
       assert(p1_once || charges <= 1);       /* p1: at most one charge per order id */
       first_at = 0;
#if DECLINES
       if :: pres = P_SUCC :: pres = P_DECL fi
#else
       pres = P_SUCC
#endif
  fi;
  if
  :: orphan[i] -> free_slot(i)
  :: else -> slot[i] = S_APPL
  fi;
  CHECK
}

inline drop(i) {
  if
  :: orphan[i] -> free_slot(i)
  :: !orphan[i] -> slot[i] = S_DROP
  :: !orphan[i] && REJECTS -> slot[i] = S_REJ
  fi
}

#define PSP_ACT(i) \
  :: atomic { slot[i] == S_PEND -> apply(i) } \
  :: atomic { slot[i] == S_PEND -> drop(i) }

active proctype PSP() {
end_psp:
  do
  PSP_ACT(0)
  PSP_ACT(1)
  PSP_ACT(2)
  PSP_ACT(3)
  od
}

/* ---- the database's clock ------------------------------------------------ */
active proctype Clock() {
end_clock:
  do
  :: atomic {
       INWIN(0) && INWIN(1) && INWIN(2) && INWIN(3) ->
       DEC(klu, 0); DEC(kra, 0); DEC(kmcu, -CW - 1); DECN(knf, -CW);
       DEC(pcreated, -DWC); DECN(first_at, -DWC);
       DECS(0); DECS(1); DECS(2); DECS(3);
       DEC(dl[1], DLMIN); DEC(dl[2], DLMIN)
     }
#if FAILOVER
  /* A failover loses the database's last commit, a lease grant. The
   * protocol's database requirement forbids lost commits; the model allows
   * one to show that fresh tokens survive it and counter-only ones do not. */
  :: atomic {
       undo_ok && !failed_over ->
       failed_over = 1; undo_ok = 0;
       ktok = undo_tok; holder = undo_holder; klu = undo_klu; kra = undo_kra; undo_tok = 0
     }
#endif
  od
}

/* ---- a client worker: Service.Create, one request after another ---------- */
#ifdef MUT_SKEW_TAKEOVER
#define WSKEW (me == 2 -> SKEW : 0)   /* worker 2's clock runs SKEW ahead and judges leases by it */
#else
#define WSKEW 0
#endif

/* paymentSubject.settle → write → Service.write → Store.Settle, one
 * transaction (atomic, so one step here): UPDATE idempotency_keys SET
 * state = 'COMPLETED', response_… = … WHERE … AND state = 'IN_PROGRESS' AND
 * lease_version = mine; UPDATE payments SET status = …, event_seq + 1 WHERE
 * … AND status = 'processing'; INSERT INTO events. 0 rows in either UPDATE →
 * rollback, re-read and answer what the record says (join). A lost ack
 * re-reads the key and settles again while it is still ours: a delay,
 * already explored. */
inline w_settle(st) {
  if
#ifdef MUT_NOFENCE
  :: kstate == K_INPROG && pstatus == P_PROC ->       /* no lease_version in the WHERE */
#else
  :: FENCED_BY(tok[me]) && pstatus == P_PROC ->
#endif
       APPLIED_BY(me); complete(st); answer(st); CHECK; goto end_done
  :: else -> goto join
  fi
}

/* Service.release → Store.Release(notSent): UPDATE idempotency_keys SET locked_until = NOW(6)
 * [, sends_not_sent = sends_not_sent + 1] WHERE … AND state =
 * 'IN_PROGRESS' AND lease_version = mine → 502/503; the retry resumes. */
inline w_release(notsent) {
  if
  :: FENCED_BY(tok[me]) -> APPLIED_BY(me); klu = 0; kcns = kcns + notsent
  :: else -> skip
  fi;
  goto retry
}

proctype Worker(byte me) {
  byte s;

end_request:
  /* 1. A request arrives (the client's first try, or its retry with the same
   *    key and body after a 5xx, a 409 or a dead connection) and claims.
   *    Service.claim → Store.Claim: BEGIN; SELECT NOW(6); INSERT
   *    idempotency_keys (IN_PROGRESS, lease_version T1, locked_until =
   *    may_send_until = reconcile_after = now + lease, send_attempts 1);
   *    INSERT payments (processing); COMMIT. Duplicate key (1062) → join.
   *    The charge deadline is the local time just before the claim + lease;
   *    the latest such time is the claim's own NOW, and that is what the
   *    model takes (an earlier one only gives the key back sooner). A lost
   *    COMMIT ack re-reads the key: ours → continue, else join; a delay or a
   *    join, both explored anyway. */
  atomic {
    reqs[me] < (me == 1 -> REQS1 : REQS2) ->
    reqs[me]++;
    if
    :: kstate == K_NONE ->
         kstate = K_INPROG; fresh(tok[me]); ktok = tok[me]; holder = me; undo_ok = 0;
#ifdef MUT_SKEW_CLAIM
         /* the claim writes its lease from worker 1's clock, SKEW behind the database's */
         klu = L - (me == 1 -> SKEW : 0); kmcu = klu; kra = klu;
#else
         klu = L; kmcu = L; kra = L;
#endif
         kca = 1; kcns = 0; knf = NULLT; katt = 0; took[me] = 1;
         pstatus = P_PROC; pcreated = 0; dl[me] = L;
         goto check
    :: else -> goto join
    fi
  };

check:
  /* 2. paymentSubject.charge → Service.sendTime: only while the local monotonic clock is before the
   *    deadline with at least PSPTimeout/2 left; else give the key back:
   *    Store.Release with not_sent (sends_not_sent + 1) → 503. */
  if
  :: atomic {
       skip;   /* keeps the inner if from merging into the outer selection */
       if
       :: dl[me] >= HALF -> goto send
       :: else -> w_release(1)
       fi
     }
  :: CRASH -> goto crashed
  fi;

send:
  /* PSP Charge(order id = f(merchant, key)) leaves the process. A stall
   * between the check and the write (GC, SIGSTOP) is bounded by PAUSE; a
   * request whose context ran out first never leaves, and the worker can
   * only call that Unknown: Store.Release, not counted → 502. */
  if
  :: atomic { dl[me] >= HALF - PAUSE -> new_slot(s); myslot[me] = s; s = 0; goto wait }
  :: atomic { dl[me] < HALF - PAUSE -> w_release(0) }
  :: CRASH -> goto crashed
  fi;

wait:
  /* 3. The PSP's answer, and the write it leads to:
   *    result → settle (Store.Settle, fenced);
   *    NotProcessed → Store.Release with not_sent → 503;
   *    permanent request error → settle failed (402), fenced;
   *    timeout, reset, lost answer (Unknown) → Store.Release → 502. */
  if
  :: atomic { slot[myslot[me]] == S_APPL -> free_slot(myslot[me]); myslot[me] = 0; w_settle(pres) }
  :: atomic { slot[myslot[me]] == S_DROP -> free_slot(myslot[me]); myslot[me] = 0; w_release(1) }
  :: atomic {
       slot[myslot[me]] == S_REJ -> free_slot(myslot[me]); myslot[me] = 0;
       if
#if REJECT_FIX
       /* only when every other authorised send certainly did nothing:
        * … AND send_attempts = sends_not_sent + 1 in the settle's WHERE;
        * otherwise it is one more send that did nothing (Release, not_sent) */
       :: FENCED_BY(tok[me]) && pstatus == P_PROC && kca == kcns + 1 ->
#else
       :: FENCED_BY(tok[me]) && pstatus == P_PROC ->
#endif
            APPLIED_BY(me); complete(P_FAIL); answer(P_FAIL); CHECK; goto end_done
#if REJECT_FIX
       :: FENCED_BY(tok[me]) && pstatus == P_PROC && kca != kcns + 1 -> w_release(1)
#endif
       :: else -> goto join
       fi
     }
  :: atomic {
       skip;   /* keeps the inner if from merging into the outer selection */
       if
       :: slot[myslot[me]] == S_PEND -> orphan[myslot[me]] = 1
       :: else -> free_slot(myslot[me])
       fi;
       myslot[me] = 0;
       w_release(0)
     }
  :: CRASH -> goto crashed
  fi;

join:
  /* J. Service.join → Store.Record: SELECT …, NOW(6) FROM idempotency_keys:
   *    COMPLETED → replay the stored answer; lease alive → wait (blocking
   *    here until the row changes: a 409 and the client's retry come back to
   *    this same read); lease expired → Service.takeOver → Store.TakeOver: UPDATE
   *    idempotency_keys SET lease_version = <new token>, locked_until =
   *    NOW(6) + lease WHERE … AND state = 'IN_PROGRESS' AND lease_version =
   *    seen AND locked_until <= NOW(6). One takeover per request: Go's join
   *    loops (takeover, resume, fenced again, join …), and each further
   *    round is what another request (REQS) does. The read has no effect and the
   *    compare-and-set checks what it read, so they are one step here (a
   *    refused TakeOver is a read that came later). may_send_until changes
   *    only under a token, so "db now > may_send_until + CW" is judged here. */
  if
  :: atomic { kstate == K_DONE -> answer(kresp); CHECK; goto end_done }
  :: atomic {
       kstate == K_INPROG && klu <= WSKEW && !took[me] ->
       took[me] = 1;
       grant(tok[me], me); klu = L + WSKEW;
       late[me] = (kmcu + CW < WSKEW);
       goto resume
     }
  :: CRASH -> goto crashed
  fi;

resume:
  /* R. paymentSubject.resume: PSP Lookup(order) first (MUT_NOLOOKUP: not at all).
   *    found → settle with it (Store.Settle, fenced);
   *    authoritatively not found and may charge again → ArmCharge;
   *    otherwise (unknown, a not-found that proves nothing) → Store.Release → 502/503.
   *    may charge again = (PSP dedupes AND payment age < dedupe window)
   *                    OR (lookup authoritative AND db now > may_send_until + CW),
   *    as payments.MayChargeAgain judges it: the dedupe branch on any
   *    not-found (ANYNF; the protocol text: an authoritative one), the age
   *    with PSPTimeout to spare (LMARGIN; the protocol text: none). */
#define MAYCHARGE (((ANYNF || AUTH) && DEDUPE && (DW == 0 || pcreated > -DWC + LMARGIN)) || (AUTH && late[me]))
/* DWGUARD: ArmCharge itself re-checks the dedupe rule on the DB clock, with
 * room for the new charge to land inside the window:
 * … AND (created_at > NOW(6) - (DedupeWindow - PSPTimeout - CreationWindow) OR <late>) */
#ifndef DWMARGIN
#define DWMARGIN (T + CW)
#endif
#define ARMOK (!DWGUARD || late[me] || (DEDUPE && (DW == 0 || pcreated > -DWC + DWMARGIN)))
#ifdef MUT_NOLOOKUP
  goto arm;
#endif
  if
  :: atomic { charges > 0 -> w_settle(pres) }
  :: atomic { (charges == 0 || !AUTH) && MAYCHARGE -> goto arm }   /* not found, and may charge again */
  :: atomic { skip; w_release(0) }        /* unknown; not found that proves nothing or allows nothing */
  :: CRASH -> goto crashed
  fi;

arm:
  /* Service.arm → Store.ArmCharge: UPDATE idempotency_keys SET may_send_until =
   *    GREATEST(may_send_until, NOW(6) + PSPTimeout), locked_until =
   *    GREATEST(locked_until, NOW(6) + PSPTimeout), send_attempts + 1,
   *    not_found_at = NULL WHERE … AND state = 'IN_PROGRESS' AND
   *    lease_version = mine (0 rows → join). Then charge (step 2) with the
   *    same order id; deadline = local time before ArmCharge + PSPTimeout
   *    (the latest such time: this NOW). */
  if
  :: atomic {
       skip;   /* keeps the inner if from merging into the outer selection */
       if
#if ARMFAIL
       /* ArmCharge errs without landing (a lock wait, a deadline before the
        * statement ran): Service.arm gives the key back as not sent
        * (Release(notSent=true)); ARMFAIL_FIX: as not known to be sent (false) */
       :: FENCED_BY(tok[me]) -> w_release(1 - ARMFAIL_FIX)
#endif
       :: FENCED_BY(tok[me]) && !ARMOK -> w_release(0)
       :: FENCED_BY(tok[me]) && ARMOK ->
            APPLIED_BY(me);
            kmcu = MAX(kmcu, T + WSKEW); klu = MAX(klu, T + WSKEW); kca++; knf = NULLT;
            dl[me] = T;
            goto check
       :: else -> goto join
       fi
     }
  :: CRASH -> goto crashed
  fi;

crashed:
  /* The process died: what it sent stays on the wire, its lease runs out by
   * itself, its client sees an error and may retry. */
  atomic {
    if
    :: slot[myslot[me]] == S_PEND -> orphan[myslot[me]] = 1
    :: slot[myslot[me]] == S_APPL || slot[myslot[me]] == S_DROP || slot[myslot[me]] == S_REJ ->
         free_slot(myslot[me])
    :: else -> skip
    fi;
    goto retry
  }

retry:
  /* no final answer: the client may send the request again */
  atomic { tok[me] = 0; dl[me] = DLMIN; late[me] = 0; myslot[me] = 0; took[me] = 0; goto end_request }

end_done:
  /* a final answer (201, 402, 202): the client is done */
  atomic { tok[me] = 0; dl[me] = DLMIN; late[me] = 0; myslot[me] = 0; took[me] = 0 }
}

/* ---- the reconciler: reconcile.Reconciler (RunOnce, settle, notFound, retry); never charges */
#ifdef MUT_SKEW_REC
#define RSKEW SKEW      /* its clock runs SKEW ahead, and it judges leases and windows by it */
#else
#define RSKEW 0
#endif

/* Store.Settle, the reconciler's: the same fenced UPDATE as the worker's
 * (succeeded/declined, failed, or requires_review stored as 202). A refused
 * write: someone else owns the key now; do nothing more. */
inline r_settle(st) {
  if
  :: FENCED_BY(rtok) && pstatus == P_PROC -> APPLIED_BY(REC); complete(st); CHECK
  :: else -> skip
  fi;
  goto rdone
}

/* Store.Reschedule: UPDATE idempotency_keys SET locked_until = NOW(6),
 * reconcile_after = ? [, reconcile_attempts = ?] WHERE … AND lease_version = mine. */
inline r_reschedule(after) {
  if
  :: FENCED_BY(rtok) -> APPLIED_BY(REC); klu = RSKEW; kra = after
  :: else -> skip
  fi;
  goto rdone
}

#ifndef NOREC
active
#endif
proctype Reconciler() {
  byte crashes;
  bit r_dmcu, r_nfnull, r_dnf;
  byte r_att;

end_claim:
  /* C. Reconciler.claimUnfinished → Store.ClaimStale: BEGIN; SELECT … FROM idempotency_keys WHERE state =
   *    'IN_PROGRESS' AND reconcile_after <= NOW(6) AND locked_until <=
   *    NOW(6) FOR UPDATE SKIP LOCKED; UPDATE … SET lease_version = <new
   *    token>, locked_until = reconcile_after = NOW(6) + lease; COMMIT. The
   *    inputs of the decision are read here, with the claim's DB now.
   * S. Reconciler.settle: key.NothingSent() (send_attempts ==
   *    sends_not_sent) → settle failed without a lookup (fenced; the count
   *    cannot change under our token, so that settle is joined to the claim). */
  atomic {
    kstate == K_INPROG && kra <= RSKEW && klu <= RSKEW ->
    grant(rtok, REC); klu = L + RSKEW; kra = L + RSKEW;
    r_dmcu = (kmcu + CW > RSKEW);                  /* claim now < may_send_until + CW */
    r_nfnull = (knf == NULLT);
    r_dnf = (knf != NULLT && knf + CW > RSKEW);    /* claim now < not_found_at + CW */
    r_att = katt;
    if
    :: kca == kcns -> r_settle(P_FAIL)
    :: else -> skip
    fi
  };

  /* S. Reconciler.settle: PSP Lookup(order), outside any transaction; found →
   *    settle with it; authoritative not-found → Reconciler.notFound; else
   *    Reconciler.retry. */
  if
  :: atomic { charges > 0 -> r_settle(pres) }                   /* found: settle with it */
  :: atomic {
       AUTH && charges == 0 ->                                   /* authoritatively not found */
       if
#ifdef MUT_NOWINDOW
       :: goto rfail                                             /* failed at once */
#else
       :: r_dmcu -> r_reschedule(kmcu + CW)       /* a charge sent under may_send_until may still land */
#ifdef MUT_ONELOOKUP
       :: !r_dmcu -> goto rfail                                  /* no second lookup */
#else
       :: !r_dmcu && r_nfnull -> goto rrecord                    /* first proof */
       :: !r_dmcu && !r_nfnull && r_dnf -> r_reschedule(knf + CW)
       :: !r_dmcu && !r_nfnull && !r_dnf -> goto rfail           /* two proofs a window apart */
#endif
#endif
       fi
     }
  :: atomic {
       /* unknown, or a not-found that proves nothing: attempts + 1 and back
        * off (Store.Reschedule with reconcile_attempts); at MaxAttempts
        * requires_review (Store.Settle, 202) */
       skip;
       if
#ifndef MUT_NOREVIEW
       :: r_att + 1 >= MAXATT -> r_settle(P_REV)
#else
       :: r_att + 1 >= MAXATT -> r_reschedule(RSKEW + BACKOFF)   /* mutant: keeps looking, never hands over */
#endif
       :: else ->
            if
            :: FENCED_BY(rtok) -> APPLIED_BY(REC); katt = r_att + 1; klu = RSKEW; kra = RSKEW + BACKOFF
            :: else -> skip
            fi;
            goto rdone
       fi
     }
  :: crashes < RCRASH -> goto rcrash
  fi;

rrecord:
  /* First proof (Reconciler.notFound → Store.Reschedule{NotFound}):
   * UPDATE idempotency_keys SET not_found_at = NOW(6),
   * reconcile_after = NOW(6) + CW, locked_until = NOW(6) WHERE … AND
   * lease_version = mine, written after the lookup answered. */
  if
  :: atomic {
       skip;   /* keeps the inner if from merging into the outer selection */
       if
       :: FENCED_BY(rtok) -> APPLIED_BY(REC); knf = RSKEW; kra = RSKEW + CW; klu = RSKEW
       :: else -> skip
       fi;
       goto rdone
     }
  :: crashes < RCRASH -> goto rcrash
  fi;

rfail:
  /* failed (Reconciler.notFound → subject.fail → Store.Settle, 402 failed),
   * after the lookup that allowed it */
#ifdef MUT_REC_CHARGES
  /* Mutant: instead of settling failed, the reconciler charges again, as a
   * resume would but without ArmCharge, and looks again later. */
  atomic {
    new_slot(r_att); orphan[r_att] = 1; r_att = 0;
    if
    :: FENCED_BY(rtok) -> APPLIED_BY(REC); klu = RSKEW; kra = RSKEW + BACKOFF
    :: else -> skip
    fi;
    goto rdone
  };
#endif
  if
  :: atomic { skip; r_settle(P_FAIL) }
  :: crashes < RCRASH -> goto rcrash
  fi;

rcrash:
  crashes++;
rdone:
  atomic { r_dmcu = 0; r_nfnull = 0; r_dnf = 0; r_att = 0; rtok = 0; goto end_claim }
}

init {
  atomic { run Worker(1); run Worker(2) }
}

/* p5: a claimed key eventually leaves IN_PROGRESS (completed, possibly as
 * requires_review), under weak fairness: pan -a -f -N p5 */
ltl p5 { [] ((kstate == K_INPROG) -> <> (kstate == K_DONE)) }
