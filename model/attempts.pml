/*
 * attempts.pml: failover between PSP accounts (design §16), checked by
 * SPIN over every interleaving of one payment's key, two client workers
 * with that key, the reconciler (the key's stale charge, the check of the
 * earlier attempt at its own account, the review queue), two PSP accounts
 * and the database's clock.
 * Go: payments/attempts.go (failover, AttemptOrderID), payments/flow.go
 * (Service.claim, send, sendTime, join, takeOver, load, resume, arm,
 * release, write), payments/charge.go (paymentSubject),
 * mysql/attempts.go (Store.Failover, ClaimAttemptChecks,
 * RecordAttemptCheck), mysql/key.go (TakeOver, ArmSend, Release, Settle),
 * mysql/reconcile.go (ClaimStale, claimLooks, Resolve),
 * reconcile/reconcile.go (settle, notFound, retry), reconcile/attempts.go
 * (checkAttempt, chargedElsewhere, giveBack, toReview), reconcile/review.go
 * (reexamine, resolve), routing/accounts.go (Choose).
 *
 * The payment's route is account A (0) then account B (1). Attempt n is
 * sent to account n-1 with its own order id n (AttemptOrderID;
 * MUT_SAME_ORDER_ID: attempt 2 reuses order id 1). Each account keeps its
 * ledger and deduplicates its order ids for ever; with SHARED the two
 * accounts are two accounts of one PSP, one ledger and one order-id
 * namespace ("a second account for resilience"). A ledger entry is an
 * order id charged (money moved) or declined; the refund of an extra
 * charge, under a refund order id derived from the attempt's order id
 * (ExtraReturnOrderID), is deduplicated too.
 *
 * A send's outcome: charged, declined (final: never a failover), certainly
 * not processed (NotProcessed: the PSP did nothing), or unknown (the answer
 * lost at any moment: the PSP may still apply it). LIAR: once, the PSP
 * answers "not processed" and may charge anyway afterwards, within the
 * creation window of the send. Lookups are authoritative; the reconciler's
 * may answer unknown (RUNKNOWN), then the key goes to requires_review.
 *
 * Time. charge.pml proves the flow's clock (lease, may_send_until, the
 * creation window, the reconciler's two not-found lookups a window apart);
 * here, as in capture.pml, it is reduced to the events it orders. A
 * worker's send deadline passes at any moment (a worker past it gives the
 * key back unsent: sendTime). The key's lease runs out at any moment once
 * every deadline has passed: locked_until is never before its holder's
 * deadline (claimed + lease, armed + PSPTimeout), and a worker whose lease
 * was taken has none left. may_send_until passes once every deadline has
 * (each is set no later than it); then, once no send of the current
 * attempt's order id is on the wire, its creation window passes (the
 * reconciler's "failed" needs it). A claim, ArmSend and the failover move
 * may_send_until and locked_until on. The earlier attempt's ended_at + CW
 * (checkAttempt waits for it) passes once every send of its order id that
 * left before the failover has landed or was refused; one that leaves after
 * the failover is not bound by it.
 *
 * Steps. One atomic step per SQL transaction or compare-and-set, as in
 * charge.pml. The join's reads (Store.Record, then load's Store.Payment)
 * and TakeOver's compare-and-set are two steps (JOINSTALL): the
 * compare-and-set checks the token and locked_until it read, not the
 * attempt the payment was read at; the failover moves the payment to its
 * next attempt under the lease's next token (TOKEN_FIX), which fences out
 * a takeover read before it. Each step of an attempt check is its own (a
 * claim, the lookup with what follows from it, the review, the record),
 * and the check may stop between them (RCRASH) or pause there while the
 * review queue looks (CHECKPAUSE). The review queue's claim (claimLooks:
 * the payment with its attempts' copy) and its lookup with the Resolve it
 * leads to are two steps too. A worker's crash is a worker
 * that stops (after the failover's commit, before its send, too); its
 * client's retry is the other worker, as in charge.pml's safety checks.
 *
 * Findings fixed on main (README, "Findings", 5-8), each undone by its
 * flag set to 0 (the fixed/ checks): TOKEN_FIX (faed385: Store.Failover
 * sets lease_version to the next token), WAIT_FIX (faed385:
 * chargedElsewhere answers "not known" for a payment in review without a
 * psp_reference, and the check waits), REF_FIX (79b2117: the check's
 * toReview of an attempt charged alone leaves psp_reference as it is),
 * PERSON_FIX (79b2117: reexamine leaves a payment whose attempts' copy
 * holds an attempt charged or extra_charge to a person).
 *
 * Left out: a third account, two-step confirms (never fail over),
 * cancellation by key (the failover's cancel_requested_at IS NULL),
 * rejected sends (Service.soleSend: charge.pml), PSPs without dedupe or
 * with a finite dedupe window (charge.pml), a non-authoritative lookup
 * (an earlier attempt then stays "not processed" and is looked at again
 * for ever), authorizations (a void instead of a refund), refunds the
 * merchant asks for, another reconciler (SKIP LOCKED, the claim's mark),
 * notifications, ops' resolve.
 */

/* ---- configuration (spin -DNAME=value) ---------------------------------- */
#ifndef REQS1
#define REQS1 1         /* requests client 1 sends with the key */
#endif
#ifndef REQS2
#define REQS2 1         /* requests client 2 sends with it (a retry, late or not) */
#endif
#ifndef SHARED
#define SHARED 0        /* A and B are two accounts of one PSP: one ledger, one order-id namespace */
#endif
#ifndef LIAR
#define LIAR 0          /* once, the PSP answers "not processed" and may charge anyway */
#endif
#ifndef DECLINES
#define DECLINES 1      /* the PSP may decline a charge */
#endif
#ifndef RUNKNOWN
#define RUNKNOWN 1      /* the reconciler's lookups of the key's charge may answer unknown: requires_review */
#endif
#ifndef BREAKER
#define BREAKER 1       /* B's breaker may be open: no account to fail over to */
#endif
#ifndef FOERR
#define FOERR 1         /* the failover's COMMIT may be lost: committed or not, the worker releases (not sent) */
#endif
#ifndef RCRASH
#define RCRASH 1        /* the reconciler may stop between the steps of a check (a crash, a lost write) */
#endif
#ifndef REVIEWQ
#define REVIEWQ 1       /* the review queue looks at a payment in review again (reconcile/review.go) */
#endif
#ifndef JOINSTALL
#define JOINSTALL 1     /* a worker may stall between the join's reads and TakeOver */
#endif
/* The fixes of findings 5-8 (README), on main: 0 undoes one (fixed/ checks). */
#ifndef TOKEN_FIX
#define TOKEN_FIX 1     /* Store.Failover sets lease_version = next; the worker goes on under it (faed385) */
#endif
#ifndef WAIT_FIX
#define WAIT_FIX 1      /* chargedElsewhere: in review without psp_reference is not known: again (faed385) */
#endif
#ifndef REF_FIX
#define REF_FIX 1       /* toReview(p, "") for an attempt charged alone: psp_reference kept (79b2117) */
#endif
#ifndef PERSON_FIX
#define PERSON_FIX 1    /* reexamine: an attempt charged or extra_charge in the copy → a person (79b2117) */
#endif
#ifndef REVIEW_TX
#define REVIEW_TX 1     /* main: the check's review and its record are one transaction (Store.ReviewAttempt); 0: the two writes of before (gaps 8 and 9) */
#endif
#ifndef CHECKPAUSE
#define CHECKPAUSE 1    /* the check may pause between its review and its record past the review's first look */
#endif
/* CHECKPAUSE=0: the check's record (or its stop) comes before the review
 * queue's first look at the payment it sent to review (ReviewFirstLook, 5
 * min after toReview; the record is the check's next statement). A pause
 * past its mark (30 s) that another reconciler's check ends by claiming
 * the row again (fencing the paused record) is a stop (RCRASH). */

#define MAXATT 2        /* reconciler passes that learn nothing before requires_review */
#define NSLOT  4

/* key row states; payment statuses; ledger entries; PSP request slots */
#define K_NONE   0
#define K_INPROG 1
#define K_DONE   2
#define P_PROC   1
#define P_SUCC   2      /* answered 201 */
#define P_DECL   3      /* answered 402, declined */
#define P_FAIL   4      /* answered 402, failed */
#define P_REV    5      /* answered 202, requires_review */
#define C_NONE   0
#define C_SUCC   1      /* the order id charged: money moved */
#define C_DECL   2      /* the order id declined */
#define S_FREE   0
#define S_PEND   1      /* on the wire: the PSP may still apply it */
#define S_APPL   2      /* applied; the answer waits for its sender */
#define S_DROP   3      /* answered not processed */
#define S_LIED   4      /* answered not processed, and the PSP may still apply it (LIAR) */
/* payment_attempts: attempt 1's row */
#define A_NONE   0      /* no earlier attempt */
#define A_NOTP   1      /* not_processed: due for its check */
#define A_ABSENT 2      /* absent */
#define A_EXTRA  3      /* extra_charge: its refund not known to be done, due again */
#define A_RET    4      /* extra_returned */
#define A_CHRG   5      /* charged, no other attempt charged: the payment went to review */

/* Where attempt n's charge is kept: ledger LG(account n-1), order id ORD(n). */
#ifdef MUT_SAME_ORDER_ID
#define ORD(n)  1
#else
#define ORD(n)  (n)
#endif
#define LG(a)   (SHARED -> 0 : (a))
#define IDX(n)  (LG((n) - 1) * 2 + ORD(n) - 1)
#define IX1     IDX(1)

/* ---- shared state: the rows --------------------------------------------- */
/* idempotency_keys */
byte  kstate;           /* state */
byte  ktok;             /* lease_version, the fencing token */
bit   kexp;             /* locked_until <= NOW(6) */
bit   mcup;             /* may_send_until has passed */
bit   cwp;              /* ... and the creation window after it, for the current attempt's order id */
byte  kca;              /* send_attempts */
byte  kcns;             /* sends_not_sent */
byte  katt;             /* reconcile_attempts */
byte  kresp;            /* the stored response */
/* payments */
byte  pstatus;          /* status */
byte  patt;             /* attempt (1 or 2); psp and merchant_order_id follow from it */
byte  pref;             /* psp_reference: the ledger entry IDX + 1 it names, 0 none */
/* payment_attempts: attempt 1's row once the payment failed over */
byte  arow;
bit   a1w;              /* its ended_at + CW has passed */
/* the attempt check between the review it started and its record (or its stop) */
bit   cpend;

/* ---- the PSPs' ledgers: entry IDX = ledger * 2 + order id - 1 ------------ */
byte  chg[4];           /* C_NONE, C_SUCC, C_DECL */
bit   rfd[4];           /* refunded in full (its ExtraReturnOrderID) */
byte  lies;
byte  sst[NSLOT];       /* charge requests on the wire */
byte  six[NSLOT];       /* the ledger entry each is for */
bit   orphan[NSLOT];    /* its sender stopped waiting (timeout, crash) */
bit   pre[NSLOT];       /* it left before attempt 1 ended: ended_at + CW waits for it */

/* ---- per actor ------------------------------------------------------------ */
byte  tok[3];           /* the token a worker holds (1, 2); 0 none */
byte  seen[3];          /* the token its join read */
bit   dlp[3] = 1;       /* its send deadline has passed (or it has none) */
byte  myatt[3];         /* the attempt its subject is (its paymentSubject's p.Attempt) */
byte  myslot[3];
byte  reqs[3];
bit   took[3];          /* this request took the lease over once already */
byte  rtok;             /* the reconciler's token */

/* ---- ghosts: not in any table; they state the properties ---------------- */
bit   a201, a402d, a402f, a202;   /* answers some client received */
hidden byte nt;         /* scratch for fresh() */
/* always 0: they only put the property's name into pan's error message */
bit   p13_once, p13_net, p13_agree, p13_answers, p13_kept;

/* ---- properties ------------------------------------------------------------ */
#define STANDS(i) (chg[i] == C_SUCC && !rfd[i])
#define NSTAND (STANDS(0) + STANDS(1) + STANDS(2) + STANDS(3))
#define NMOVED ((chg[0] == C_SUCC) + (chg[1] == C_SUCC) + (chg[2] == C_SUCC) + (chg[3] == C_SUCC))
#define PENDING(i) (sst[i] == S_PEND || sst[i] == S_LIED)
#define NOPEND(x) (!(PENDING(0) && six[0] == (x)) && !(PENDING(1) && six[1] == (x)) && \
                   !(PENDING(2) && six[2] == (x)) && !(PENDING(3) && six[3] == (x)))
#define NOPRE (!(PENDING(0) && pre[0]) && !(PENDING(1) && pre[1]) && \
               !(PENDING(2) && pre[2]) && !(PENDING(3) && pre[3]))
#define SETTLED_ROW (arow == A_NONE || arow == A_ABSENT || arow == A_RET || arow == A_CHRG)
/* quiescent: the key completed, nothing on the wire, no worker may still
 * send, the earlier attempt checked for good */
#define QUIESCENT (kstate == K_DONE && !PENDING(0) && !PENDING(1) && !PENDING(2) && !PENDING(3) && \
                   dlp[1] && dlp[2] && SETTLED_ROW)
/* a standing charge the records name: the payment's psp_reference, its
 * current attempt (its psp and order id), or attempt 1's row "charged" */
#define NAMED(i) (!STANDS(i) || pref == (i) + 1 || (pstatus == P_REV && (i) == IDX(patt)) || \
                  ((i) == IX1 && arow == A_CHRG))
/* p13_net: once quiescent, at most one of the payment's charges stands, net
 * of the reconciler's refunds of extra charges */
#define P_NET (!QUIESCENT || NSTAND <= 1)
/* p13_agree: once quiescent, succeeded ⇔ exactly one charge stands and it
 * is the one recorded; declined, failed ⇒ none stands; requires_review ⇒
 * every charge that stands is one the records name (none lost) */
#define P_AGREE (!QUIESCENT || \
                 ((pstatus != P_SUCC || (NSTAND == 1 && pref > 0 && STANDS(pref - 1))) && \
                  ((pstatus != P_DECL && pstatus != P_FAIL) || NSTAND == 0) && \
                  NAMED(0) && NAMED(1) && NAMED(2) && NAMED(3)))
/* p13_answers: an answer given is never contradicted, also while charges
 * still land: a 201 stays succeeded with its charge standing, a 402 stays
 * what it said with no charge standing (a 202 may become what the review
 * queue learns) */
#define P_ANSWERS ((!a201 || (pstatus == P_SUCC && pref > 0 && STANDS(pref - 1))) && \
                   (!a402d || (pstatus == P_DECL && NSTAND == 0)) && \
                   (!a402f || (pstatus == P_FAIL && NSTAND == 0)))
/* p13_agree with a PSP that lies (LIAR), where answers given before the
 * reconciler's check may be contradicted: once quiescent, a charge of the
 * earlier attempt that stands leaves the payment in requires_review, for a
 * person (never declined, failed, or succeeded on its own) */
#define P_AGREE_LIED (!QUIESCENT || arow == A_NONE || !STANDS(IX1) || pstatus == P_REV)

/* ---- helpers --------------------------------------------------------------- */
inline fresh(t) {
  d_step {
    nt = 1;
    do
    :: (nt == ktok || nt == tok[1] || nt == tok[2] || nt == rtok || nt == seen[1] || nt == seen[2]) -> nt++
    :: else -> break
    od;
    t = nt; nt = 0
  }
}

#define FENCED_BY(t) (kstate == K_INPROG && ktok == (t))

inline answer(st) {
  if
  :: st == P_SUCC -> a201 = 1
  :: st == P_DECL -> a402d = 1
  :: st == P_FAIL -> a402f = 1
  :: st == P_REV  -> a202 = 1
  fi
}

/* The key completes (Store.Settle): state COMPLETED with the response, the
 * payment's status and psp_reference. Nothing reads the lease columns of a
 * completed key, so they are reset. */
inline complete(st, ref) {
  kstate = K_DONE; pstatus = st; kresp = st; pref = ref;
  kexp = 0; mcup = 0; cwp = 0; kca = 0; kcns = 0; katt = 0
}

inline free_slot(i) { sst[i] = S_FREE; six[i] = 0; orphan[i] = 0; pre[i] = 0 }

inline new_slot(i, x) {
  if
  :: sst[0] == S_FREE -> i = 0
  :: else -> if
             :: sst[1] == S_FREE -> i = 1
             :: else -> if :: sst[2] == S_FREE -> i = 2 :: else -> i = 3 fi
             fi
  fi;
  assert(sst[i] == S_FREE);
  sst[i] = S_PEND; six[i] = x
}

/* ---- the PSP accounts ------------------------------------------------------ */
/* Charge(order id) at an account: applied to its ledger's entry, or a
 * repeat of an order id it holds, which answers that entry (dedupe for
 * ever); or certainly not applied (NotProcessed). */
inline apply(i) {
  if
  :: chg[six[i]] != C_NONE -> skip                    /* a repeat: the first charge's answer */
  :: else ->
#if DECLINES
       if :: chg[six[i]] = C_SUCC :: chg[six[i]] = C_DECL fi;
#else
       chg[six[i]] = C_SUCC;
#endif
#if !LIAR
       /* p13_once: with PSPs that keep their word, at most one of the
        * payment's charges ever moves money, over all its attempts */
       assert(p13_once || NMOVED <= 1);
#endif
       skip
  fi;
  if
  :: orphan[i] -> free_slot(i)
  :: !orphan[i] && sst[i] == S_PEND -> sst[i] = S_APPL
  :: !orphan[i] && sst[i] == S_LIED -> sst[i] = S_DROP   /* its sender is still told "not processed" */
  fi
}

inline drop(i) {
  if
  :: orphan[i] -> free_slot(i)
  :: else -> sst[i] = S_DROP
  fi
}

#define PSP_ACT(i) \
  :: atomic { sst[i] == S_PEND -> apply(i) } \
  :: atomic { sst[i] == S_PEND -> drop(i) } \
  :: atomic { sst[i] == S_PEND && lies < LIAR -> lies++; sst[i] = S_LIED } \
  :: atomic { sst[i] == S_LIED -> apply(i) } \
  :: atomic { sst[i] == S_LIED -> drop(i) }

active proctype PSP() {
end_psp:
  do
  PSP_ACT(0)
  PSP_ACT(1)
  PSP_ACT(2)
  PSP_ACT(3)
  od
}

/* ---- the database's clock, reduced to the events it orders --------------- */
active proctype Clock() {
end_clock:
  do
  /* the lease runs out; locked_until is never before its holder's deadline
   * (claimed + lease, armed + PSPTimeout), and a worker whose lease ran out
   * has no deadline left either */
  :: atomic { kstate == K_INPROG && !kexp && dlp[1] && dlp[2] -> kexp = 1 }
  :: atomic { !dlp[1] -> dlp[1] = 1 }                                /* worker 1's send deadline passes */
  :: atomic { !dlp[2] -> dlp[2] = 1 }
  :: atomic { kstate == K_INPROG && !mcup && dlp[1] && dlp[2] -> mcup = 1 }   /* may_send_until passes */
  :: atomic { kstate == K_INPROG && mcup && !cwp && NOPEND(IDX(patt)) -> cwp = 1 }  /* + CW */
  :: atomic { arow != A_NONE && !a1w && NOPRE -> a1w = 1 }          /* attempt 1's ended_at + CW */
  od
}

/* ---- the properties checked at every step -------------------------------- */
active proctype Monitor() {
end_monitor:
  do
  :: atomic { !(P_NET) -> assert(p13_net || P_NET) }
#if !LIAR
  :: atomic { !(P_AGREE) -> assert(p13_agree || P_AGREE) }
  :: atomic { !(P_ANSWERS) -> assert(p13_answers || P_ANSWERS) }
#else
  :: atomic { !(P_AGREE_LIED) -> assert(p13_agree || P_AGREE_LIED) }
#endif
  od
}

/* ---- a client worker: Service.Create, one request after another ---------- */

/* paymentSubject.settle → Service.write → Store.Settle, one transaction:
 * UPDATE idempotency_keys SET state = 'COMPLETED', … WHERE … AND state =
 * 'IN_PROGRESS' AND lease_version = mine AND subject_id = ?; UPDATE
 * payments SET status = ?, psp_reference = ?, … WHERE … AND status =
 * 'processing' (not on the attempt); INSERT events. 0 rows → rollback,
 * join. ref is the ledger entry its answer came from (psp_reference). */
inline w_settle(st, ref) {
  if
  :: FENCED_BY(tok[me]) && pstatus == P_PROC -> complete(st, ref); answer(st); goto end_done
  :: else -> goto join
  fi
}

/* Service.release → Store.Release(notSent): UPDATE idempotency_keys SET
 * locked_until = NOW(6), sends_not_sent = sends_not_sent + ? WHERE … AND
 * state = 'IN_PROGRESS' AND lease_version = mine → 502/503. */
inline w_release(ns) {
  if
  :: FENCED_BY(tok[me]) -> kexp = 1; kcns = kcns + ns
  :: else -> skip
  fi;
  goto retry
}

proctype Worker(byte me) {
  byte s, r;
  bit unk;              /* MUT_FAILOVER_UNKNOWN: the outcome that led to the failover was unknown */

end_request:
  /* 1. Service.claim → Store.Claim: the key (IN_PROGRESS, a fresh token,
   *    locked_until = may_send_until = now + lease, send_attempts 1) and
   *    the payment (processing, attempt 1 at account A, order id 1) in one
   *    transaction; 1062 → join. The deadline: claimed + lease. */
  atomic {
    reqs[me] < (me == 1 -> REQS1 : REQS2) ->
    reqs[me]++;
    if
    :: kstate == K_NONE ->
         kstate = K_INPROG; fresh(tok[me]); ktok = tok[me]; kexp = 0; mcup = 0; cwp = 0;
         kca = 1; kcns = 0; katt = 0; pstatus = P_PROC; patt = 1;
         myatt[me] = 1; dlp[me] = 0; took[me] = 1;
         goto check
    :: else -> goto join
    fi
  };

check:
  /* 2. Service.send → sendTime: past the deadline (less than PSPTimeout/2
   *    left), give the key back unsent (Release, not_sent); else
   *    paymentSubject.send: PSP Charge(order id of its attempt) at its
   *    attempt's account (h.adapter). */
  atomic {
    skip;   /* keeps the inner if from merging into the outer selection */
    if
    :: !dlp[me] -> new_slot(s, IDX(myatt[me])); myslot[me] = s; s = 0; goto wait
    :: else -> w_release(1)
    fi
  };

wait:
  /* 3. The PSP's answer, and the write it leads to: a result → settle;
   *    NotProcessed → failover (or Release, not sent); timeout, reset, lost
   *    answer (Unknown) → Release → 502. */
  if
  :: atomic {
       sst[myslot[me]] == S_APPL ->
       r = six[myslot[me]]; free_slot(myslot[me]); myslot[me] = 0;
       if
       :: chg[r] == C_SUCC -> w_settle(P_SUCC, r + 1)
       :: chg[r] == C_DECL -> w_settle(P_DECL, r + 1)
       fi
     }
  :: atomic {
       sst[myslot[me]] == S_DROP || sst[myslot[me]] == S_LIED ->
       if
       :: sst[myslot[me]] == S_LIED -> orphan[myslot[me]] = 1   /* the PSP may still apply it */
       :: else -> free_slot(myslot[me])
       fi;
       myslot[me] = 0; unk = 0; goto notproc
     }
  :: atomic {
       skip;   /* keeps the inner if from merging into the outer selection */
       if
       :: PENDING(myslot[me]) -> orphan[myslot[me]] = 1
       :: else -> free_slot(myslot[me])
       fi;
       myslot[me] = 0;
#ifdef MUT_FAILOVER_UNKNOWN
       unk = 1; goto notproc    /* mutant: tries a failover after an unknown outcome too */
#else
       w_release(0)
#endif
     }
  fi;

notproc:
  /* 4. Service.failover: the next candidate not tried whose breaker lets it
   *    through (Choose); none (the subject is attempt 2 already, or B's
   *    breaker is open) → Release, not sent → 503. Store.Failover, one
   *    transaction: UPDATE idempotency_keys SET send_attempts = 1,
   *    sends_not_sent = 0, not_found_at = NULL, may_send_until =
   *    GREATEST(…, NOW(6) + PSPTimeout), locked_until = GREATEST(…) WHERE …
   *    AND state = 'IN_PROGRESS' AND lease_version = mine AND
   *    cancel_requested_at IS NULL AND subject_id = ? AND send_attempts =
   *    sends_not_sent + 1; INSERT payment_attempts (attempt 1, A, order id
   *    1, not_processed, check_after = NOW(6)); UPDATE payments SET psp =
   *    B, merchant_order_id = order id 2, attempt = 2 WHERE … AND attempt =
   *    1 AND status = 'processing'. Either UPDATE matching nothing rolls
   *    back: the key still ours → ErrArmRefused → Release, not sent; else
   *    ErrFenced → join. Then Service.send of attempt 2 (deadline: armed +
   *    PSPTimeout); a crash after the commit leaves it claimed and unsent.
   *    TOKEN_FIX: the UPDATE sets lease_version = next (h.token.Next())
   *    too, and the worker goes on under it. */
  if
  :: atomic {
       skip;   /* keeps the inner if from merging into the outer selection */
       if
       :: myatt[me] == 1 && FENCED_BY(tok[me]) && kca == kcns + 1 && patt == 1 && pstatus == P_PROC ->
            kca = 1; kcns = 0; kexp = 0; mcup = 0; cwp = 0;
            arow = A_NOTP; a1w = 0;
            /* the sends of attempt 1's order id still on the wire (a PSP
             * that lied about one): ended_at + CW waits for them */
            pre[0] = (PENDING(0) && six[0] == IX1); pre[1] = (PENDING(1) && six[1] == IX1);
            pre[2] = (PENDING(2) && six[2] == IX1); pre[3] = (PENDING(3) && six[3] == IX1);
            patt = 2; myatt[me] = 2; dlp[me] = 0; unk = 0;
#if TOKEN_FIX
            fresh(tok[me]); ktok = tok[me];
#endif
            goto check
       :: myatt[me] == 1 && FENCED_BY(tok[me]) && !(kca == kcns + 1 && patt == 1 && pstatus == P_PROC) ->
            w_release(1 - unk)                              /* ErrArmRefused */
       :: myatt[me] == 1 && !FENCED_BY(tok[me]) -> goto join  /* ErrFenced */
       :: myatt[me] != 1 -> w_release(1 - unk)              /* no account left to try */
       fi
     }
  :: atomic { BREAKER && myatt[me] == 1 -> w_release(1 - unk) }   /* B's breaker is open */
#if FOERR
  /* The COMMIT's answer is lost (ErrWriteUnknown): committed, and the
   * worker releases as not sent under the next token (TOKEN_FIX: the
   * release of holding{token: next} passes, h.token's is fenced; before
   * it, under the token it holds). (Not committed is the ErrArmRefused
   * branch: the release under the next token is fenced, h.token's passes.) */
  :: atomic {
       myatt[me] == 1 && FENCED_BY(tok[me]) && kca == kcns + 1 && patt == 1 && pstatus == P_PROC ->
       kca = 1; kcns = 0; kexp = 0; mcup = 0; cwp = 0;
       arow = A_NOTP; a1w = 0;
       pre[0] = (PENDING(0) && six[0] == IX1); pre[1] = (PENDING(1) && six[1] == IX1);
       pre[2] = (PENDING(2) && six[2] == IX1); pre[3] = (PENDING(3) && six[3] == IX1);
       patt = 2;
#if TOKEN_FIX
       fresh(tok[me]); ktok = tok[me];
#endif
       w_release(1)
     }
#endif
  fi;

join:
  /* J. Service.join → Store.Record: COMPLETED → replay the stored answer;
   *    lease alive → wait (blocking here until the row changes); expired →
   *    Service.takeOver → load → Store.Payment: the subject, its attempt
   *    (account and order id) as it stands now. One takeover per request. */
  if
  :: atomic { kstate == K_DONE -> answer(kresp); goto end_done }
  :: atomic {
       kstate == K_INPROG && kexp && !took[me] ->
       seen[me] = ktok; myatt[me] = patt;
#if !JOINSTALL
       /* a world without that stall: TakeOver follows at once, and passes */
       took[me] = 1; seen[me] = 0; fresh(tok[me]); ktok = tok[me]; kexp = 0;
       goto resume
#endif
       goto takeover
     }
  fi;

takeover:
  /* T. Store.TakeOver: UPDATE idempotency_keys SET lease_version = <new>,
   *    locked_until = NOW(6) + lease WHERE … AND state = 'IN_PROGRESS' AND
   *    lease_version = seen AND locked_until <= NOW(6); refused → join
   *    again. Its own statement, after the reads: what it checks is the
   *    token and the lease, not the attempt the subject was read at. */
  if
  :: atomic {
       FENCED_BY(seen[me]) && kexp ->
       took[me] = 1; seen[me] = 0; fresh(tok[me]); ktok = tok[me]; kexp = 0;
       goto resume
     }
  :: atomic { !(FENCED_BY(seen[me]) && kexp) -> seen[me] = 0; goto join }
  fi;

resume:
  /* R. Service.resume with the subject load read: PSP Lookup(its order id)
   *    at its account (h.adapter): found → settle with it; not found →
   *    MaySendAgain (the account dedupes for ever: yes) → arm; unknown →
   *    Release → 502. */
  if
  :: atomic {
       chg[IDX(myatt[me])] != C_NONE -> r = IDX(myatt[me]);
       if
       :: chg[r] == C_SUCC -> w_settle(P_SUCC, r + 1)
       :: chg[r] == C_DECL -> w_settle(P_DECL, r + 1)
       fi
     }
  :: atomic { chg[IDX(myatt[me])] == C_NONE -> goto arm }
  :: atomic { skip; w_release(0) }
  fi;

arm:
  /* A. Service.arm → Store.ArmSend: UPDATE idempotency_keys SET
   *    may_send_until = GREATEST(…, NOW(6) + PSPTimeout), locked_until =
   *    GREATEST(…), send_attempts + 1, not_found_at = NULL WHERE … AND
   *    lease_version = mine AND <guard: dedupe for ever> (0 rows → join).
   *    Then send (step 2), deadline armed + PSPTimeout. */
  atomic {
    skip;   /* keeps the inner if from merging into the outer selection */
    if
    :: FENCED_BY(tok[me]) -> kca++; kexp = 0; mcup = 0; cwp = 0; dlp[me] = 0; goto check
    :: else -> goto join
    fi
  };

retry:
  /* no final answer: the client may send the request again */
  atomic { tok[me] = 0; seen[me] = 0; dlp[me] = 1; myatt[me] = 0; myslot[me] = 0; took[me] = 0; r = 0; unk = 0; goto end_request }

end_done:
  /* a final answer (201, 402, 202): the client is done */
  atomic { tok[me] = 0; seen[me] = 0; dlp[me] = 1; myatt[me] = 0; myslot[me] = 0; took[me] = 0; r = 0; unk = 0 }
}

/* ---- the reconciler: the key's stale charge ------------------------------ */

/* Store.Settle, the reconciler's, fenced as the worker's. */
inline r_settle(st, ref) {
  if
  :: FENCED_BY(rtok) && pstatus == P_PROC -> complete(st, ref)
  :: else -> skip
  fi;
  goto rdone
}

proctype Reconciler() {
  bit r_cw;
  byte r_att, r;

end_claim:
  /* C. Reconciler.claimUnfinished → Store.ClaimStale: the key IN_PROGRESS,
   *    its lease run out, locked FOR UPDATE SKIP LOCKED, a new token, with
   *    its payment read in the same transaction (the attempt it looks up:
   *    its psp and merchant_order_id). key.NothingSent() (send_attempts =
   *    sends_not_sent) → failed without a lookup. */
  atomic {
    kstate == K_INPROG && kexp ->
    fresh(rtok); ktok = rtok; kexp = 0;
    r_cw = cwp; r_att = patt;
    if
    :: kca == kcns -> r_settle(P_FAIL, 0)
    :: else -> skip
    fi
  };

  /* S. Reconciler.settle: PSP Lookup(the current order id) at the current
   *    account: found → settle with it; authoritative not-found past
   *    may_send_until + CW (charge.pml's two lookups) → failed; before →
   *    Reschedule; unknown → reconcile_attempts + 1, at MaxAttempts
   *    requires_review (no psp_reference). */
  if
  :: atomic {
       chg[IDX(r_att)] != C_NONE -> r = IDX(r_att);
       if
       :: chg[r] == C_SUCC -> r_settle(P_SUCC, r + 1)
       :: chg[r] == C_DECL -> r_settle(P_DECL, r + 1)
       fi
     }
  :: atomic { chg[IDX(r_att)] == C_NONE && r_cw -> r_settle(P_FAIL, 0) }
  :: atomic {
       chg[IDX(r_att)] == C_NONE && !r_cw ->
       if :: FENCED_BY(rtok) -> kexp = 1 :: else -> skip fi;
       goto rdone
     }
#if RUNKNOWN
  :: atomic {
       skip;   /* keeps the inner if from merging into the outer selection */
       if
       :: katt + 1 >= MAXATT -> r_settle(P_REV, 0)
       :: else ->
            if :: FENCED_BY(rtok) -> katt++; kexp = 1 :: else -> skip fi;
            goto rdone
       fi
     }
#endif
  :: RCRASH -> goto rdone   /* it stops; its lease runs out by itself */
  fi;

rdone:
  atomic { rtok = 0; r_cw = 0; r_att = 0; r = 0; goto end_claim }
}

/* ---- the reconciler: the check of the earlier attempt -------------------- */

/* chargedElsewhere(p) → (elsewhere, known): the payment's own attempt holds
 * its money: succeeded (canceled, requires_capture: not in this world), or
 * requires_review with a psp_reference; known: not in review without one
 * (WAIT_FIX; before it, such a payment counted as "no other attempt
 * charged"). Declined and failed: (false, true). Processing never gets
 * here (again, above). */
#define ELSEWHERE(st, ref) ((st) == P_SUCC || ((st) == P_REV && (ref) != 0))
#if WAIT_FIX
#define KNOWN(st, ref)     ((st) != P_REV || (ref) != 0)
#else
#define KNOWN(st, ref)     1
#endif

/* toReview's Store.Resolve, for an attempt charged alone (toReview(p, "")
 * with REF_FIX, toReview(p, its charge's reference) before) and for an
 * extra charge (the first time: toReview(p, "")). */
inline review_charged() {
  if
  :: pstatus != P_REV && pstatus != P_PROC ->
       pstatus = P_REV; cpend = !REVIEW_TX;
#if !REF_FIX
       if :: pref == 0 -> pref = IX1 + 1 :: else -> skip fi;
#endif
       skip
  :: else -> skip
  fi
}

inline review_extra() {
  if
  :: crow != A_EXTRA && pstatus != P_REV && pstatus != P_PROC -> pstatus = P_REV; cpend = !REVIEW_TX
  :: else -> skip
  fi
}

proctype Checker() {
  byte cst, cref, crow;
  bit cret;

end_check:
  /* K. Reconciler.checkAttempts → Store.ClaimAttemptChecks: the row due
   *    (check_after <= NOW(6)), marked for a lease, with its payment read
   *    as it stands; checkAttempt waits for its ended_at + CW. */
  atomic {
    (arow == A_NOTP || arow == A_EXTRA) && a1w ->
    cst = pstatus; cref = pref; crow = arow
  };

  /* L. Lookup(attempt 1's order id) at A, and what follows, judged on the
   *    payment read at the claim: authoritative not-found → absent; unknown
   *    → again; declined → absent; charged while the payment is still
   *    processing → again; charged, chargedElsewhere not known → again;
   *    charged and no other attempt charged (false) → review; charged and
   *    another attempt charged → giveBack: Refund(ExtraReturnOrderID(order
   *    id 1)) at A, which may be lost on the way (its answer) or not
   *    processed, then review.
   *    RecordAttemptCheck (fenced on the mark) records each. */
  if
  :: atomic { chg[IX1] == C_NONE -> arow = A_ABSENT; goto cdone }
  :: atomic { chg[IX1] == C_DECL -> arow = A_ABSENT; goto cdone }
  :: atomic { skip; goto cdone }
  :: atomic { chg[IX1] == C_SUCC && cst == P_PROC -> goto cdone }
  :: atomic { chg[IX1] == C_SUCC && cst != P_PROC && !KNOWN(cst, cref) -> goto cdone }
  :: atomic { chg[IX1] == C_SUCC && cst != P_PROC && KNOWN(cst, cref) && !ELSEWHERE(cst, cref) -> goto ccharged }
  :: atomic {
       chg[IX1] == C_SUCC && cst != P_PROC && KNOWN(cst, cref) && ELSEWHERE(cst, cref) ->
       /* p13_kept: what is given back is an extra charge: another of the
        * payment's charges stands, and it is not the one the payment's
        * record names as its money */
       assert(p13_kept || (pref != IX1 + 1 && NSTAND - STANDS(IX1) >= 1));
       if
       :: rfd[IX1] = 1; cret = 1
       :: rfd[IX1] = 1; cret = 0      /* refunded, its answer lost */
       :: cret = 0                    /* not processed */
       fi;
       goto cextra
     }
  fi;

ccharged:
  /* toReview(p, ""): Store.Resolve on the payment as it stands: already
   *    requires_review → nothing; else requires_review, psp_reference as
   *    it was (REF_FIX; before it, toReview(p, the charge's reference) set
   *    it to A's charge when empty). Then RecordAttemptCheck: charged,
   *    settled, on the row and on the payment's copy (REVIEW_TX: both in
   *    one transaction). */
#if REVIEW_TX
  if
  :: atomic { skip; review_charged(); arow = A_CHRG; goto cdone }
  :: RCRASH -> goto cdone
  fi;
#else
  if
  :: atomic { skip; review_charged() }
  :: RCRASH -> goto cdone
  fi;
  if
  :: atomic { arow = A_CHRG; goto cdone }
  :: RCRASH -> goto cdone
  fi;
#endif

cextra:
  /* the first time (the row's outcome was not extra_charge yet):
   *    toReview(p, ""); then RecordAttemptCheck: extra_returned, or
   *    extra_charge and again (REVIEW_TX: both in one transaction). */
#if REVIEW_TX
  if
  :: atomic {
       skip; review_extra();
       if :: cret -> arow = A_RET :: else -> arow = A_EXTRA fi;
       goto cdone
     }
  :: RCRASH -> goto cdone
  fi;
#else
  if
  :: atomic { skip; review_extra() }
  :: RCRASH -> goto cdone
  fi;
  if
  :: atomic { cret -> arow = A_RET; goto cdone }
  :: atomic { !cret -> arow = A_EXTRA; goto cdone }
  :: RCRASH -> goto cdone
  fi;
#endif

cdone:
  atomic { cst = 0; cref = 0; crow = 0; cret = 0; cpend = 0; goto end_check }
}

/* ---- the reconciler: the review queue ------------------------------------ */

/* Reconciler.reexamine: a payment in requires_review whose look is due is
 * claimed (claimLooks: review_after <= NOW(6), FOR UPDATE SKIP LOCKED, the
 * look's mark in review_after) with its attempts' copy as it stands then;
 * PERSON_FIX: an earlier attempt in it charged or extra_charge → only
 * rescheduled, for a person. Otherwise it is looked up at its current
 * account under its current order id (pay.PSP, pay.MerchantOrderID); an
 * authoritative answer is resolved as a person's decision would be
 * (Store.Resolve, fenced on the status and the look's mark, not on the
 * attempts' copy), and the key's stored answer replays it: the charge found
 * → ApplyCharge (succeeded or declined, its psp_reference);
 * authoritatively not found twice a creation window apart, the first a
 * window after the payment entered review (every send had left before: its
 * deadline ≤ locked_until ≤ the claim that sent it to review) → failed,
 * psp_reference as it was; anything else → looked at again later. Nothing
 * else takes a payment out of requires_review here, so the mark holds
 * while the status does. */
#if PERSON_FIX
#define FOR_A_PERSON (arow == A_CHRG || arow == A_EXTRA)
#else
#define FOR_A_PERSON 0
#endif

proctype ReviewQ() {
  byte r;
end_look:
  atomic { pstatus == P_REV && !FOR_A_PERSON && (CHECKPAUSE || !cpend) -> skip };
  if
  :: atomic {
       pstatus == P_REV && chg[IDX(patt)] != C_NONE -> r = IDX(patt);
       if
       :: chg[r] == C_SUCC -> pstatus = P_SUCC; kresp = P_SUCC
       :: chg[r] == C_DECL -> pstatus = P_DECL; kresp = P_DECL
       fi;
       pref = r + 1; r = 0; goto end_look
     }
  :: atomic {
       pstatus == P_REV && chg[IDX(patt)] == C_NONE && dlp[1] && dlp[2] && NOPEND(IDX(patt)) ->
       pstatus = P_FAIL; kresp = P_FAIL; goto end_look
     }
  :: atomic { goto end_look }   /* no decision: rescheduled */
  fi
}

init {
  atomic {
    run Worker(1); run Worker(2); run Reconciler(); run Checker();
#if REVIEWQ
    run ReviewQ()
#endif
  }
}
