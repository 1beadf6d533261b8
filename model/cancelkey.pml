/*
 * cancelkey.pml: cancel-by-key (design §15), checked by SPIN over every
 * interleaving of the POST /payments key it cancels (its original request,
 * whose worker goes on after its client gave up, and a late duplicate of
 * it), one POST /payments/cancel_by_key, the reconciler (the key's stale
 * charge, the cancellations due), a PSP that may lose, refuse or decline a
 * charge, and the database's clock.
 * Go: payments/cancelbykey.go (CancelByKey, decideCancel,
 * FinishCancellation), mysql/cancelbykey.go (ClaimCancellation,
 * FinishCancellation, ClaimCancellations), payments/flow.go (Service.claim,
 * send, join: the tombstone, takeOver, resume, arm, release),
 * reconcile/reconcile.go (settle, notFound), reconcile/action.go
 * (cancellations).
 *
 * The charge is an authorization (MANUAL: requires_capture, undone by a
 * void) or takes the money at once (succeeded, undone by a refund in
 * full). Time is reduced as in capture.pml, to the events it orders on the
 * key: its lease runs out; may_send_until passes (a worker that has not
 * sent yet gives the key back unsent); then, once no charge is on the
 * wire, the creation window after it (charge.pml proves that the
 * reconciler's "failed" then means no charge can land).
 *
 * The void (the refund) that FinishCancellation makes runs on the flow
 * with the key derived from the canceled one (derivedKey), so that every
 * finisher makes the same one: its first call claims it and sends it; the
 * PSP carries it out at a moment of its own, or not at all (not
 * processed); a later call joins it: in flight (409), or resumed: the
 * lookup settles it once the PSP carried it out, else it is sent again
 * (the PSP deduplicates its order id). capture.pml checks that flow for
 * operations; refund.pml for refunds.
 *
 * Left out: the cancellation's own key replayed (CancelByKey finishes
 * nothing on a replay; the reconciler does), a second cancellation of the
 * key (ErrCanceledAlready), a payment awaiting its confirmation or its
 * customer, requires_review, the reconciler's stale look at the derived
 * key (it may drop a void the PSP certainly never processed; the
 * cancellation then waits for the authorization's expiry), the purge (it
 * keeps a tombstone: PurgeKeys' NOT (subject_id = '' …)).
 */

/* ---- configuration (spin -DNAME=value) ---------------------------------- */
#ifndef MANUAL
#define MANUAL 1        /* capture_method manual: the charge authorizes (else it takes the money) */
#endif
#ifndef DECLINES
#define DECLINES 1      /* the PSP may decline the charge */
#endif
#ifndef REQS1
#define REQS1 1         /* requests of the original client */
#endif
#ifndef REQS2
#define REQS2 1         /* requests of the late duplicate */
#endif

/* key states; payment statuses; the PSP's charge; cancellations; slots */
#define K_NONE   0
#define K_INPROG 1
#define K_DONE   2
#define P_NONE   0
#define P_PROC   1      /* processing */
#define P_AUTH   2      /* requires_capture */
#define P_SUCC   3
#define P_DECL   4
#define P_FAIL   5
#define P_CANC   6
#define C_NONE   0      /* nothing under the order id */
#define C_DECL   1
#define C_AUTH   2      /* psp.Authorized: the amount held */
#define C_CAPT   3      /* psp.Succeeded: the money taken */
#define C_VOID   4
#define X_NONE      0   /* key_cancellations.status */
#define X_CANCELED  1   /* nothing was or will be charged */
#define X_VOIDED    2
#define X_REFUNDED  3
#define X_REQUESTED 4   /* cancel_requested */
#define S_FREE   0
#define S_PEND   1
#define S_APPL   2
#define S_DROP   3
#define REC      3      /* the reconciler's token; client c's is c */
#define CBK      4      /* the grant a cancellation takes of an expired lease */
#define NSLOT    3
#define MOVED (MANUAL -> C_AUTH : C_CAPT)   /* what a charge that moved money is */
#define HELD (pch == C_AUTH || (pch == C_CAPT && !prefunded))   /* money the PSP holds of the key */

/* ---- shared state: the rows --------------------------------------------- */
/* idempotency_keys: the POST /payments key */
byte  kst;
bit   ktomb;            /* completed with fingerprint CanceledByKey and no subject: the tombstone */
byte  ktok;             /* lease_version: its holder */
bit   klive, kmsu, kcw; /* lease alive; past may_send_until; and its creation window, nothing on the wire */
byte  kca, kcns;        /* send_attempts, sends_not_sent */
/* payments */
byte  pst;
bit   pvoided;          /* canceled by its void at the PSP (a PSP reference, not authorization_expired) */
/* key_cancellations */
byte  xst;
/* the derived void's (refund's) key, and its send */
byte  dst;
bit   dpend;            /* on the wire: the PSP may still carry it out */
bit   drefund;          /* the refund recorded succeeded */

/* ---- the PSP ---------------------------------------------------------------- */
byte  pch;              /* the charge under the key's order id */
bit   prefunded;        /* refunded in full */
byte  slot[NSLOT];
bit   orphan[NSLOT];
byte  sans[NSLOT];

bit   cansend[3];       /* client c may still send: may_send_until has not passed */

/* always 0: they only put the property's name into pan's error message */
bit   p12_net, p12_late;

/* ---- properties ------------------------------------------------------------ */
#define ONWIRE (slot[0] == S_PEND || slot[1] == S_PEND || slot[2] == S_PEND || dpend)
#define QUIESCENT (kst != K_INPROG && dst != K_INPROG && !ONWIRE)
#define FINISHED (xst == X_CANCELED || xst == X_VOIDED || xst == X_REFUNDED)
/* p12_net: a cancellation recorded canceled charged nothing; once finished
 * and quiescent, the PSP holds none of the key's money (voided, or refunded
 * in full) */
#define P12NET (p12_net || ((xst != X_CANCELED || pch == C_NONE || pch == C_DECL) && \
                            (!FINISHED || !QUIESCENT || !HELD)))
#define CHECK assert(P12NET)

#define FENCED_BY(t) (kst == K_INPROG && ktok == (t))

inline free_slot(i) { slot[i] = S_FREE; orphan[i] = 0; sans[i] = 0 }

inline new_slot(i) {
  if
  :: slot[0] == S_FREE -> i = 0
  :: else -> if :: slot[1] == S_FREE -> i = 1 :: else -> i = 2 fi
  fi;
  assert(slot[i] == S_FREE);
  slot[i] = S_PEND
}

/* ---- the PSP --------------------------------------------------------------- */
/* Charge(order id = f(merchant, key)), deduplicated on the order id: a
 * repeat answers the first. p12_late: no charge moves money once the key's
 * cancellation is recorded canceled. */
inline apply(i) {
  if
  :: pch == C_NONE ->
#if DECLINES
       if :: pch = MOVED :: pch = C_DECL fi;
#else
       pch = MOVED;
#endif
       assert(p12_late || pch == C_DECL || xst != X_CANCELED)
  :: else -> skip
  fi;
  if
  :: orphan[i] -> free_slot(i)
  :: else -> slot[i] = S_APPL; sans[i] = pch
  fi;
  CHECK
}

#define PSP_ACT(i) \
  :: atomic { slot[i] == S_PEND -> apply(i) } \
  :: atomic { slot[i] == S_PEND && orphan[i] -> free_slot(i) } \
  :: atomic { slot[i] == S_PEND && !orphan[i] -> slot[i] = S_DROP }

active proctype PSP() {
end_psp:
  do
  PSP_ACT(0)
  PSP_ACT(1)
  PSP_ACT(2)
  /* the void (the refund) of the derived key's order id: carried out once,
   * or certainly not processed */
  :: atomic {
       dpend -> dpend = 0;
       if
#if MANUAL
       :: pch == C_AUTH -> pch = C_VOID
#else
       :: pch == C_CAPT -> prefunded = 1
#endif
       :: else -> skip
       fi;
       CHECK
     }
  :: atomic { dpend -> dpend = 0 }
  od
}

/* ---- the database's clock, reduced to the events it orders --------------- */
#define PENDING (slot[0] == S_PEND || slot[1] == S_PEND || slot[2] == S_PEND)

active proctype Clock() {
end_clock:
  do
  :: atomic { kst == K_INPROG && klive -> klive = 0 }
  :: atomic { kst == K_INPROG && !kmsu -> kmsu = 1; cansend[1] = 0; cansend[2] = 0 }
  :: atomic { kst == K_INPROG && kmsu && !kcw && !PENDING -> kcw = 1 }
  od
}

/* ---- the key's requests: Service.Create on the flow ------------------------ */

/* paymentSubject.settle → Store.Settle, fenced on the token and on the
 * payment still processing; the charge read by ApplyCharge: authorized →
 * requires_capture, succeeded, declined. */
inline settle_with(c, who, fenced) {
  if
  :: FENCED_BY(who) && pst == P_PROC ->
       if
       :: c == C_AUTH -> pst = P_AUTH
       :: c == C_CAPT -> pst = P_SUCC
       :: c == C_DECL -> pst = P_DECL
       :: c == C_VOID -> pst = P_CANC; pvoided = 1
       fi;
       kst = K_DONE; fenced = 0; CHECK
  :: else -> fenced = 1
  fi
}

/* Service.release → Store.Release(notSent), fenced → 502/503 */
inline release(notsent) {
  if
  :: FENCED_BY(me) -> klive = 0; kcns = kcns + notsent
  :: else -> skip
  fi;
  goto retry
}

proctype Client(byte me) {
  byte s, reqs, fenced;
  bit took;

end_request:
  /* 1. POST /payments with the key: Service.claim → Store.Claim: INSERT
   *    idempotency_keys (IN_PROGRESS, a fresh lease, may_send_until,
   *    send_attempts 1); INSERT payments (processing); COMMIT. 1062 (the
   *    key's record exists: a claim, a completed key, a tombstone) → join. */
  atomic {
    reqs < (me == 1 -> REQS1 : REQS2) -> reqs++;
    if
    :: kst != K_NONE -> goto join
    :: kst == K_NONE ->
         kst = K_INPROG; ktok = me; klive = 1; kmsu = 0; kcw = 0; kca = 1; kcns = 0;
         cansend[me] = 1; pst = P_PROC;
         goto send
    fi
  };

send:
  /* 2. Service.send → sendTime: only before may_send_until, else
   *    Store.Release(notSent) → 503; then Charge(order id), outside any
   *    transaction. */
  atomic {
    skip;   /* keeps the inner if from merging into the outer selection */
    if
    :: cansend[me] -> cansend[me] = 0; new_slot(s); goto wait
    :: else -> release(1)
    fi
  };

wait:
  /* 3. result → settle (fenced); NotProcessed → Release(notSent) → 503;
   *    Unknown → Release → 502. */
  if
  :: atomic {
       slot[s] == S_APPL ->
       settle_with(sans[s], me, fenced); free_slot(s); s = 0;
       if
       :: fenced == 0 -> goto end_done
       :: else -> fenced = 0; goto join
       fi
     }
  :: atomic { slot[s] == S_DROP -> free_slot(s); s = 0; release(1) }
  :: atomic {
       skip;   /* keeps the inner if from merging into the outer selection */
       if
       :: slot[s] == S_PEND -> orphan[s] = 1
       :: else -> free_slot(s)
       fi;
       s = 0;
       release(0)
     }
  fi;

end_join:
join:
  /* J. Service.join → Store.Record: a tombstone (CanceledByKey, completed)
   *    → 409 canceled-by-key, nothing charged; COMPLETED → replay; lease
   *    alive → wait; expired → Service.takeOver (Store.TakeOver, once per
   *    request) and resume. */
  if
  :: atomic { kst == K_DONE -> goto end_done }
  :: atomic { kst == K_INPROG && !klive && !took -> took = 1; ktok = me; klive = 1; goto resume }
  fi;

resume:
  /* R. paymentSubject.lookup (authoritative): found → settle with it;
   *    not found → MaySendAgain (the PSP deduplicates) → ArmSend; the
   *    lookup fails → Release → 502. */
  if
  :: atomic {
       pch != C_NONE ->
       settle_with(pch, me, fenced);
       if
       :: fenced == 0 -> goto end_done
       :: else -> fenced = 0; goto join
       fi
     }
  :: atomic { pch == C_NONE -> goto arm }
  :: atomic { skip; release(0) }
  fi;

arm:
  /* Service.arm → Store.ArmSend, fenced: may_send_until and the lease
   * moved on, send_attempts + 1; then send again with the same order id. */
  atomic {
    skip;   /* keeps the inner if from merging into the outer selection */
    if
    :: FENCED_BY(me) -> kmsu = 0; kcw = 0; klive = 1; kca++; cansend[me] = 1; goto send
    :: else -> goto join
    fi
  };

retry:
  atomic { took = 0; cansend[me] = 0; goto end_request };

end_done:
  skip
}

/* ---- FinishCancellation ------------------------------------------------------ */
/* payments.FinishCancellation: at most two rounds (a void, then what it
 * left); each reads the payment (Store.Payment) and does what its status
 * calls for. The record is written by Store.FinishCancellation: UPDATE
 * key_cancellations SET status = ? … WHERE … AND status =
 * 'cancel_requested' (and the cancellation's own key's answer): a second
 * finisher's write finds none (ErrFenced, "finished by another"). A
 * decision read from a final status is joined to its write (the status
 * cannot change in between). */
inline xfinish(to) {
  if
  :: xst == X_REQUESTED -> xst = to
  :: else -> skip
  fi;
  CHECK
}

/* the derived void (refund) settles, fenced on its key: the payment
 * canceled by its void (the refund succeeded) */
inline dsettle() {
  if
  :: dst == K_INPROG ->
       dst = K_DONE;
#if MANUAL
       pst = P_CANC; pvoided = 1;
#else
       drefund = 1;
#endif
       CHECK
  :: else -> skip
  fi
}

#if MANUAL
#define DDONE (pch == C_VOID)       /* the lookup finds the charge voided */
#else
#define DDONE (prefunded)           /* the lookup finds the refund */
#endif

inline finish() {
  rounds = 0;
fin_read:
  atomic {
    skip;   /* keeps the inner if from merging into the outer selection */
    if
    :: pst == P_PROC -> goto fin_end                         /* not known yet */
    :: pst == P_DECL || pst == P_FAIL -> xfinish(X_CANCELED); goto fin_end
    :: pst == P_CANC && pvoided -> xfinish(X_VOIDED); goto fin_end
    :: pst == P_CANC && !pvoided -> xfinish(X_CANCELED); goto fin_end
#ifdef MUT_K_HOLDLEFT
    /* Mutant: an authorization taken for a payment that charged nothing */
    :: pst == P_AUTH -> xfinish(X_CANCELED); goto fin_end
#else
    :: pst == P_AUTH -> goto fin_op                          /* operate: a void */
#endif
    :: pst == P_SUCC && drefund -> xfinish(X_REFUNDED); goto fin_end   /* the refund's key replays 201 */
    :: pst == P_SUCC && !drefund -> goto fin_op              /* CreateRefund in full */
    fi
  };
fin_op:
  /* Service.operate (Cancel of the payment) or CreateRefund, with
   * derivedKey(kc): its claim (Store.ClaimOperation: the void's operation
   * in flight; Store.ClaimRefund: the reservation) and its send; or a join
   * of that key: completed → replay; in flight → 409 (later); taken over →
   * the lookup settles it, or it is sent again (deduplicated). */
  atomic {
    skip;   /* keeps the inner if from merging into the outer selection */
    if
    :: dst == K_NONE -> dst = K_INPROG; dpend = 1; goto fin_wait
    :: dst == K_INPROG -> goto fin_end                         /* in flight: 409 */
    :: dst == K_INPROG && DDONE -> dsettle(); goto fin_next    /* resumed: found */
    :: dst == K_INPROG && !DDONE -> dpend = 1; goto fin_end    /* resumed: sent again */
    :: dst == K_DONE -> goto fin_next
    fi
  };
fin_wait:
  /* the PSP's answer: carried out → the derived key settles (fenced);
   * lost, or not processed → an error: later */
  if
  :: atomic { DDONE && !dpend -> dsettle(); goto fin_next }
  :: atomic { skip; goto fin_end }
  fi;
fin_next:
  atomic { rounds++; if :: rounds < 2 -> goto fin_read :: else -> goto fin_end fi };
fin_end:
  rounds = 0
}

/* ---- POST /payments/cancel_by_key ------------------------------------------- */
proctype Canceler() {
  byte rounds;

  /* CancelByKey → Store.ClaimCancellation, one transaction: its own key
   * (claimKey); SELECT … FROM idempotency_keys WHERE <the canceled key>
   * FOR UPDATE (an absent record locks its gap: a claim of the key waits,
   * then finds what this wrote); lockPayment; decideCancel; INSERT IGNORE
   * INTO key_cancellations; its writes; the own key completed. decideCancel:
   *   nothing claimed → the tombstone: INSERT INTO idempotency_keys
   *     (COMPLETED, fingerprint CanceledByKey, no subject); canceled;
   *   IN_PROGRESS, the lease expired and send_attempts = sends_not_sent →
   *     the payment canceled (UPDATE payments … WHERE status = ?) and the
   *     lease taken: UPDATE idempotency_keys SET lease_version = <new
   *     grant>, state = 'COMPLETED' … WHERE … AND lease_version = ? AND
   *     locked_until <= NOW(6) AND send_attempts = sends_not_sent; canceled;
   *   IN_PROGRESS otherwise → cancel_requested;
   *   completed: declined, failed, canceled → canceled (nothing charged);
   *     requires_capture, succeeded → cancel_requested.
   * MUT_K_NOTOMB: no tombstone (only the key_cancellations row).
   * MUT_K_NOPROOF: the expired lease fenced without send_attempts =
   * sends_not_sent. */
#ifdef MUT_K_NOPROOF
#define PROVEN 1
#else
#define PROVEN (kca == kcns)
#endif
  atomic {
    if
#ifdef MUT_K_NOTOMB
    :: kst == K_NONE -> xst = X_CANCELED
#else
    :: kst == K_NONE -> kst = K_DONE; ktomb = 1; xst = X_CANCELED
#endif
    :: kst == K_INPROG && !klive && PROVEN -> pst = P_CANC; kst = K_DONE; ktok = CBK; xst = X_CANCELED
    :: kst == K_INPROG && !(!klive && PROVEN) -> xst = X_REQUESTED
    :: kst == K_DONE && (pst == P_DECL || pst == P_FAIL || pst == P_CANC) -> xst = X_CANCELED
    :: kst == K_DONE && (pst == P_AUTH || pst == P_SUCC) -> xst = X_REQUESTED
    fi;
    CHECK
  };
  /* a cancellation requested is finished at once when it can be */
  if
  :: xst == X_REQUESTED -> finish()
  :: else -> skip
  fi
}

/* ---- the reconciler ------------------------------------------------------------ */
inline r_fail() {
  if
  :: FENCED_BY(REC) && pst == P_PROC -> pst = P_FAIL; kst = K_DONE; CHECK
  :: else -> skip
  fi
}

active proctype Reconciler() {
  byte rounds, fenced;
  bit r_cw;

end_rec:
  do
  /* C. Store.ClaimStale (a new token); S. Reconciler.settle: NothingSent →
   *    failed; the lookup: found → settle with it; not found →
   *    Reconciler.notFound: failed once past may_send_until + CW (r_cw,
   *    read at the claim), else Store.Reschedule. */
  :: atomic {
       kst == K_INPROG && !klive ->
       ktok = REC; klive = 1; r_cw = kcw;
       if
       :: kca == kcns -> r_fail(); goto rdone
       :: else -> goto rlook
       fi
     }
  /* reconcile cancellations → Store.ClaimCancellations (due_at <= NOW(6)
   * AND status = 'cancel_requested' … FOR UPDATE SKIP LOCKED; due_at a
   * lease on) → FinishCancellation */
  :: xst == X_REQUESTED -> finish()
  od;

rlook:
  if
  :: atomic { pch != C_NONE -> settle_with(pch, REC, fenced); fenced = 0; goto rdone }
  :: atomic {
       pch == C_NONE ->
       if
       :: r_cw -> r_fail()
       :: !r_cw && FENCED_BY(REC) -> klive = 0
       :: !r_cw && !FENCED_BY(REC) -> skip
       fi;
       goto rdone
     }
  :: atomic {
       skip;
       if
       :: FENCED_BY(REC) -> klive = 0
       :: else -> skip
       fi;
       goto rdone
     }
  fi;

rdone:
  atomic { r_cw = 0; goto end_rec }
}

init {
  atomic { run Client(1); run Client(2); run Canceler() }
}
