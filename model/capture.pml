/*
 * capture.pml: captures and voids of one authorization (design §15),
 * checked by SPIN over every interleaving of two operation keys (key 0 a
 * capture, key 1 a capture or a void), each with its client's requests, the
 * reconciler (stale operations, authorization expiry), a PSP that may lose
 * or refuse a call and lets the authorization lapse at a moment of its own,
 * and the database's clock.
 * Go: payments/operation.go (NewOperation, ApplyOperation,
 * OperationSettled, renderOperation, operationSubject), payments/flow.go
 * (Service.claim, send, sendTime, join, takeOver, resume, arm, release),
 * mysql/operation.go (ClaimOperation, SettleOperation,
 * ExpireAuthorizations), reconcile/reconcile.go (settle, notFound),
 * reconcile/operations.go (operationSubject), reconcile/action.go (expire),
 * psp/psp.go (Capturer), psp/fake (processCapture, processVoid, Lapse).
 *
 * The payment is an authorization of AUTHAMT (requires_capture, no
 * operation in flight) whose PSP holds the amount. Each operation key runs
 * the one flow: the claim (the key's INSERT and the compare-and-set of the
 * operation in flight on the payment row, one transaction), the send within
 * the lease, the fenced settle, a retry's takeover that looks the charge up
 * first (still authorized: the operation has not happened, ErrNotFound)
 * and sends again with the same order id, which the PSP deduplicates.
 *
 * Time. The flow's clock (lease, may_send_until, the creation window, the
 * reconciler's two not-found lookups a window apart) is charge.pml's,
 * which proves what it buys: once the reconciler's claim is past
 * may_send_until + CW with every lookup "not found", no send of the order
 * id can still land. Here the clock is reduced to the events it orders, per
 * key: its lease runs out (locked_until <= NOW(6)), at any moment;
 * may_send_until passes, and a worker that has not sent yet gives the key
 * back unsent (sendTime); then, once no send of the key is on the wire,
 * the creation window after it passes. ArmSend moves may_send_until on
 * again. And once, capture_before passes (EXPIRY).
 *
 * The PSP (psp.Capturer, the fake): a capture or a void answers the charge
 * as it stands after the call. A capture takes its amount of an authorized
 * charge (a smaller one releases the rest) and nothing of one captured or
 * voided; a void releases an authorized charge. Either may be lost on the
 * way back (Unknown) or certainly not processed. The order id of each key
 * is deduplicated for ever; a repeat takes nothing more, which the charge's
 * one-way states give for free. The authorization may lapse at any moment
 * (LAPSE): the PSP's own expiry, on its own clock. The PSP does not hold a
 * capture to the authorization itself (as one that over-captures): the
 * claim's refusal (422) is what does.
 *
 * Left out: requires_review (lookups that never answer: charge.pml), a
 * payment waiting for its customer or for its confirmation (the void's
 * other cases), a rejected operation (Rejected settles refused under
 * Service.soleSend, as for charges), notifications.
 */

/* ---- configuration (spin -DNAME=value) ---------------------------------- */
#ifndef KIND1
#define KIND1 2         /* key 1: 1 a capture, 2 a void; key 0 is a capture */
#endif
#ifndef AMT0
#define AMT0 1          /* amount_to_capture of key 0 (a partial capture) */
#endif
#ifndef AMT1
#define AMT1 2          /* amount_to_capture of key 1, when a capture */
#endif
#ifndef REQS0
#define REQS0 2         /* requests key 0's client sends: its first and a retry */
#endif
#ifndef REQS1
#define REQS1 2
#endif
#ifndef EXPIRY
#define EXPIRY 0        /* capture_before passes on the database's clock; the reconciler expires it */
#endif
#ifndef LAPSE
#define LAPSE 1         /* the PSP lets the authorization lapse at a moment of its own */
#endif

#define AUTHAMT 2       /* the authorized amount */
#define OPCAP   1
#define OPVOID  2
#define KIND(k) ((k) == 0 -> OPCAP : KIND1)
#define AMT(k)  ((k) == 0 -> AMT0 : AMT1)
#define REQS(k) ((k) == 0 -> REQS0 : REQS1)

/* key states; payment statuses; the PSP's charge; answers; wire slots */
#define K_NONE   0
#define K_INPROG 1
#define K_DONE   2
#define P_AUTH   1      /* requires_capture */
#define P_SUCC   2      /* succeeded: captured */
#define P_CANC   3      /* canceled: voided, or authorization_expired */
#define C_AUTH   1      /* psp.Authorized */
#define C_CAPT   2      /* psp.Succeeded, AmountCaptured */
#define C_VOID   3      /* psp.Voided */
#define R_NONE   0
#define R_201    1      /* a capture that took its money */
#define R_200    2      /* a void that released the authorization */
#define R_402    3      /* another outcome won, or refused (the operation dropped) */
#define S_FREE   0
#define S_PEND   1      /* on the wire: the PSP may still act on it */
#define S_APPL   2      /* acted on; the answer waits for its sender */
#define S_DROP   3      /* certainly never processed */
#define LAPSED   3      /* pvoidby: the PSP's own expiry */
#define REC      3      /* the reconciler's token; worker k's is k + 1 */
#define NSLOT    4

/* ---- shared state: the rows --------------------------------------------- */
/* idempotency_keys, one row per operation key */
byte  kst[2];           /* state */
byte  ktok[2];          /* lease_version: its holder (a process runs one attempt at a time) */
bit   klive[2];         /* locked_until > NOW(6) */
bit   kmsu[2];          /* NOW(6) > may_send_until */
bit   kcw[2];           /* NOW(6) > may_send_until + CW, nothing of it on the wire: nothing can land */
byte  kca[2];           /* send_attempts */
byte  kcns[2];          /* sends_not_sent */
byte  kresp[2];         /* the stored answer */
byte  kramt[2];         /* the amount_captured a 201 shows */
/* payments */
byte  pst = P_AUTH;     /* status */
byte  pamt;             /* amount_captured */
byte  pop;              /* op_key: 0 none, k + 1 */
bit   cbp;              /* NOW(6) >= capture_before */

/* ---- the PSP's charge ----------------------------------------------------- */
byte  pc = C_AUTH;
byte  pcap;             /* what it captured */
byte  pcapby;           /* whose capture order id took it: k + 1 */
byte  pvoidby;          /* whose void order id released it: k + 1, or LAPSED */
byte  slot[NSLOT];      /* sends on the wire */
byte  sk[NSLOT];        /* whose */
bit   sid[NSLOT];       /* MUT_C_FRESHID: a resend's order id, not the key's first */
bit   orphan[NSLOT];    /* its sender stopped waiting */
byte  sans[NSLOT];      /* the answer: the charge as it stood after the call */
byte  samt[NSLOT];

/* ---- per worker ------------------------------------------------------------- */
bit   cansend[2];       /* worker k may still send: its deadline (may_send_until) has not passed */

/* ---- ghosts: not in any table; they state the properties ---------------- */
byte  pcids;            /* the capture order ids that reached the PSP (bit 2k + sid) */
bit   was_succ, was_canc;
/* always 0: they only put the property's name into pan's error message */
bit   p11_cap, p11_once, p11_excl, p11_agree;

/* ---- properties ------------------------------------------------------------ */
#define ONWIRE (slot[0] == S_PEND || slot[1] == S_PEND || slot[2] == S_PEND || slot[3] == S_PEND)
#define QUIESCENT (kst[0] != K_INPROG && kst[1] != K_INPROG && !ONWIRE)
#define A201(k) (kresp[k] == R_201 -> kramt[k] : 0)
/* p11_cap: captured <= authorized, at the PSP, on the payment row, and in
 * what the capture keys answered 201 (each a record that its capture took
 * the amount_captured it shows) */
#define P11CAP (p11_cap || (pcap <= AUTHAMT && pamt <= AUTHAMT && A201(0) + A201(1) <= AUTHAMT))
/* p11_excl, in the gateway's records: the payment is never both captured and canceled */
#define P11EXCL (p11_excl || !(was_succ && was_canc))
/* p11_agree: an answer is the PSP's truth: a capture answered 201 is the
 * capture that took the money, one answered 402 never takes any; a void
 * answered 200 left the charge voided, one answered 402 never voids it;
 * once quiescent, succeeded <=> captured, with what the PSP took */
#define AGREECAP(k) ((kresp[k] != R_201 || pcapby == (k) + 1) && (kresp[k] != R_402 || pcapby != (k) + 1))
#define AGREEVOID(k) ((kresp[k] != R_200 || pc == C_VOID) && (kresp[k] != R_402 || pvoidby != (k) + 1))
#if KIND1 == OPCAP
#define AGREE1 AGREECAP(1)
#else
#define AGREE1 AGREEVOID(1)
#endif
#define P11AGREE (p11_agree || (AGREECAP(0) && AGREE1 && \
  (!QUIESCENT || (((pst == P_SUCC) == (pc == C_CAPT)) && (pst != P_SUCC || pamt == pcap)))))
#define CHECK assert(P11CAP); assert(P11EXCL); assert(P11AGREE)

/* ---- helpers --------------------------------------------------------------- */
#define FENCED_BY(k, t) (kst[k] == K_INPROG && ktok[k] == (t))
#define PENDING(k) ((slot[0] == S_PEND && sk[0] == (k)) || (slot[1] == S_PEND && sk[1] == (k)) || \
                    (slot[2] == S_PEND && sk[2] == (k)) || (slot[3] == S_PEND && sk[3] == (k)))

inline status(st) {
  pst = st;
  if
  :: st == P_SUCC -> was_succ = 1
  :: st == P_CANC -> was_canc = 1
  :: else -> skip
  fi
}

inline free_slot(i) { slot[i] = S_FREE; sk[i] = 0; sid[i] = 0; orphan[i] = 0; sans[i] = 0; samt[i] = 0 }

inline new_slot(i, k, id) {
  if
  :: slot[0] == S_FREE -> i = 0
  :: else -> if
             :: slot[1] == S_FREE -> i = 1
             :: else -> if :: slot[2] == S_FREE -> i = 2 :: else -> i = 3 fi
             fi
  fi;
  assert(slot[i] == S_FREE);
  slot[i] = S_PEND; sk[i] = k; sid[i] = id
}

/* ---- the PSP --------------------------------------------------------------- */
/* processCapture / processVoid: the order id reaches the PSP, which acts on
 * the charge as it stands and answers it. */
inline apply(i) {
  if
  :: KIND(sk[i]) == OPCAP ->
       /* p11_once: one capture order id per authorization (psp.Capturer:
        * the answer does not say which order id took the money) */
       assert(p11_once || (pcids & ~(1 << (2 * sk[i] + sid[i]))) == 0);
       pcids = pcids | (1 << (2 * sk[i] + sid[i]));
       /* p11_excl at the PSP: no capture after a void */
       assert(p11_excl || pvoidby == 0 || pvoidby == LAPSED);
       if
       :: pc == C_AUTH -> pc = C_CAPT; pcap = AMT(sk[i]); pcapby = sk[i] + 1
       :: else -> skip  /* captured already, voided or lapsed: takes nothing */
       fi
  :: else ->
       /* p11_excl at the PSP: no void after a capture */
       assert(p11_excl || pcapby == 0);
       if
       :: pc == C_AUTH -> pc = C_VOID; pvoidby = sk[i] + 1
       :: else -> skip
       fi
  fi;
  if
  :: orphan[i] -> free_slot(i)
  :: else -> slot[i] = S_APPL; sans[i] = pc; samt[i] = pcap
  fi;
  CHECK
}

inline drop(i) {
  if
  :: orphan[i] -> free_slot(i)
  :: else -> slot[i] = S_DROP
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
#if LAPSE
  /* the authorization lapses at the PSP (fake: Lapse): Voided, no capture takes it */
  :: atomic { pc == C_AUTH -> pc = C_VOID; pvoidby = LAPSED; CHECK }
#endif
  od
}

/* ---- the database's clock, reduced to the events it orders --------------- */
#define LEASE_ENDS(k) :: atomic { kst[k] == K_INPROG && klive[k] -> klive[k] = 0 }
#define MSU_PASSES(k) :: atomic { kst[k] == K_INPROG && !kmsu[k] -> kmsu[k] = 1; cansend[k] = 0 }
#define CW_PASSES(k)  :: atomic { kst[k] == K_INPROG && kmsu[k] && !kcw[k] && !PENDING(k) -> kcw[k] = 1 }

active proctype Clock() {
end_clock:
  do
  LEASE_ENDS(0)
  LEASE_ENDS(1)
  MSU_PASSES(0)
  MSU_PASSES(1)
  CW_PASSES(0)
  CW_PASSES(1)
#if EXPIRY
  :: atomic { !cbp -> cbp = 1 }
#endif
  od
}

/* ---- a client's requests on operation key k: Service.operate on the flow -- */

/* ApplyOperation on the charge as answered or looked up, then
 * OperationSettled → operationSubject.settle → Store.SettleOperation, one
 * transaction: completeKey (… WHERE state = 'IN_PROGRESS' AND lease_version
 * = mine); UPDATE payments SET status = ?, amount_captured = ?, op_kind =
 * NULL, op_key = NULL … WHERE … AND op_key = ? AND op_kind = ?; its event.
 * 0 rows in either → rolled back (ErrFenced) → join. A charge still
 * authorized: the operation has not happened (ErrOperationPending), an
 * Unknown outcome: the caller gives the key back. */
inline settle_with(c, amt, who, fenced) {
  if
  :: c == C_AUTH -> fenced = 2
  :: c != C_AUTH && FENCED_BY(k, who) && pop == k + 1 ->
       if
       :: c == C_CAPT -> status(P_SUCC); pamt = amt
       :: c == C_VOID -> status(P_CANC)   /* a capture's: authorization_expired */
       fi;
       pop = 0;
       kst[k] = K_DONE;
       if
       :: KIND(k) == OPCAP && c == C_CAPT -> kresp[k] = R_201; kramt[k] = pamt
       :: KIND(k) == OPVOID && c == C_VOID -> kresp[k] = R_200
       :: else -> kresp[k] = R_402
       fi;
       fenced = 0;
       CHECK
  :: else -> fenced = 1
  fi
}

/* Service.release → Store.Release(notSent): UPDATE idempotency_keys SET
 * locked_until = NOW(6) [, sends_not_sent + 1] WHERE … AND lease_version =
 * mine → 502/503; the client may retry. */
inline release(notsent) {
  if
  :: FENCED_BY(k, me) -> klive[k] = 0; kcns[k] = kcns[k] + notsent
  :: else -> skip
  fi;
  goto retry
}

proctype Worker(byte k) {
  byte me = k + 1;
  byte s, reqs, fenced;
  bit took, ok, armed;

end_request:
  /* 1. A request arrives (Capture or Cancel → Service.operate → run →
   *    Service.claim) and claims: Store.ClaimOperation, one transaction:
   *    SELECT NOW(6); claimKey: INSERT idempotency_keys (IN_PROGRESS, a
   *    fresh lease_version, locked_until = may_send_until = now + lease,
   *    send_attempts 1) (1062 → ErrExists → join); lockPayment: SELECT …
   *    FROM payments … FOR UPDATE; NewOperation decides on the locked row:
   *    an operation in flight → 409 (retry later); a capture of a payment
   *    not requires_capture, or past capture_before → 409; more than the
   *    authorized → 422; a void of one not requires_capture → 409 (each
   *    rolls back: the key stays free); else UPDATE payments SET op_kind,
   *    op_key, op_amount, op_reason … WHERE … AND op_kind IS NULL; COMMIT.
   * MUT_C_NOCAS: the payment read without its lock and written without
   * the compare-and-set (no op_kind IS NULL). MUT_C_UNLOCKED: a void's
   * claim reads the payment without its lock and decides on that read; its
   * UPDATE keeps op_kind IS NULL (0 rows: rolled back, a 500). Either
   * decides in one step and writes in the next. */
#define REFUSED (pop != 0 || pst != P_AUTH || (KIND(k) == OPCAP && cbp))
#ifdef MUT_C_NOLIMIT
#define TOOMUCH 0       /* the claim does not hold amount_to_capture to the authorization */
#else
#define TOOMUCH (KIND(k) == OPCAP && AMT(k) > AUTHAMT)
#endif
/* the claim's writes: the key IN_PROGRESS under a fresh lease, the operation in flight */
#define CLAIM kst[k] = K_INPROG; ktok[k] = me; klive[k] = 1; kmsu[k] = 0; kcw[k] = 0; \
              kca[k] = 1; kcns[k] = 0; cansend[k] = 1; pop = k + 1; goto send
#if defined(MUT_C_NOCAS)
#define UNLOCKED 1
#elif defined(MUT_C_UNLOCKED)
#define UNLOCKED (KIND(k) == OPVOID)
#else
#define UNLOCKED 0
#endif
  atomic {
    reqs < REQS(k) -> reqs++;
    if
    :: kst[k] != K_NONE -> goto join
    :: kst[k] == K_NONE && UNLOCKED -> ok = !REFUSED && !TOOMUCH; goto unlocked   /* the read, decided on */
    :: kst[k] == K_NONE && !UNLOCKED && pop != 0 -> goto retry       /* 409 in flight: nothing stored */
    :: kst[k] == K_NONE && !UNLOCKED && pop == 0 && (REFUSED || TOOMUCH) -> goto end_refused   /* 409, 422 */
    :: kst[k] == K_NONE && !UNLOCKED && !REFUSED && !TOOMUCH -> CLAIM
    fi
  };

unlocked:
  /* the mutants' write, a step after their read */
  atomic {
    skip;   /* keeps the inner if from merging into the outer selection */
    if
    :: !ok -> goto end_refused
#ifdef MUT_C_NOCAS
    :: ok -> ok = 0; CLAIM
#else
    :: ok && pop != 0 -> ok = 0; goto retry        /* op_kind IS NULL matched no row: rolled back, 500 */
    :: ok && pop == 0 -> ok = 0; CLAIM
#endif
    fi
  };

#ifdef MUT_C_FRESHID
#define FRESHID armed   /* the PSP's idempotency key made per attempt: a resend has an order id of its own */
#else
#define FRESHID 0       /* OperationOrderID(kind, merchant, payment, key): every send the same */
#endif
send:
  /* 2. Service.send → sendTime: only before the deadline (may_send_until);
   *    else Store.Release(notSent) → 503. Then the PSP call, Capture or
   *    Void with the key's order id (OperationOrderID), outside any
   *    transaction. */
  atomic {
    skip;   /* keeps the inner if from merging into the outer selection */
    if
    :: cansend[k] -> cansend[k] = 0; new_slot(s, k, FRESHID); goto wait
    :: else -> release(1)
    fi
  };

wait:
  /* 3. The PSP's answer, and the write it leads to: the charge as it
   *    stands → settle_with (fenced); NotProcessed → Store.Release(notSent)
   *    → 503; timeout, reset, lost answer (Unknown) → Store.Release → 502. */
  if
  :: atomic {
       slot[s] == S_APPL ->
       settle_with(sans[s], samt[s], me, fenced); free_slot(s); s = 0;
       if
       :: fenced == 0 -> goto end_done
       :: fenced == 1 -> fenced = 0; goto join
       :: fenced == 2 -> fenced = 0; release(0)
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
  /* J. Service.join → Store.Record: COMPLETED → replay the stored answer;
   *    lease alive → wait (blocking here until the row changes); expired →
   *    Service.takeOver → Store.TakeOver: UPDATE idempotency_keys SET
   *    lease_version = <new token>, locked_until = NOW(6) + lease WHERE …
   *    AND lease_version = seen AND locked_until <= NOW(6). Once per
   *    request (charge.pml). load: the payment must hold this key's
   *    operation in flight, else an internal error (500). */
  if
  :: atomic { kst[k] == K_DONE -> goto end_done }
  :: atomic {
       kst[k] == K_INPROG && !klive[k] && !took ->
       took = 1; ktok[k] = me; klive[k] = 1;
       if
       :: pop == k + 1 -> goto resume
       :: else -> goto retry
       fi
     }
  fi;

resume:
  /* R. Service.resume: operationSubject.lookup reads the charge (Lookup of
   *    the payment's order id) and ApplyOperation: captured or voided →
   *    Service.settle (fenced); still authorized → ErrNotFound, and
   *    MaySendAgain holds (the PSP deduplicates the order id) → ArmSend;
   *    the lookup fails → Store.Release → 502. */
  if
  :: atomic {
       pc != C_AUTH ->
       settle_with(pc, pcap, me, fenced);
       if
       :: fenced == 0 -> goto end_done
       :: else -> fenced = 0; goto join
       fi
     }
  :: atomic { pc == C_AUTH -> goto arm }
  :: atomic { skip; release(0) }
  fi;

arm:
  /* Service.arm → Store.ArmSend: UPDATE idempotency_keys SET may_send_until
   *    = GREATEST(may_send_until, NOW(6) + PSPTimeout), locked_until =
   *    GREATEST(…), send_attempts + 1 WHERE … AND lease_version = mine
   *    (0 rows → join); then send again (step 2) with the same order id. */
  atomic {
    skip;   /* keeps the inner if from merging into the outer selection */
    if
    :: FENCED_BY(k, me) ->
         kmsu[k] = 0; kcw[k] = 0; klive[k] = 1; kca[k]++; cansend[k] = 1; armed = 1;
         goto send
    :: else -> goto join
    fi
  };

retry:
  /* no final answer (502, 503, 409 in flight, 500): the client may send it again */
  atomic { took = 0; armed = 0; cansend[k] = 0; goto end_request };

end_refused:
  /* refused by the payment's state (409, 422): nothing stored, the client stops */
  skip;
end_done:
  /* a final answer: the client is done */
  skip
}

/* ---- the reconciler: stale operations (reconcile.Reconciler.settle with
 * operationSubject) and authorization expiry (expire → ExpireAuthorizations);
 * it never sends. ---------------------------------------------------------- */

/* operationSubject's write: payments.OperationSettled, fenced as a worker's
 * (Store.SettleOperation), and first on the payment read at the claim still
 * holding this key's operation (else ErrFenced). fail is the operation
 * dropped: the payment as read, its operation let go, 402 (refused). */
inline r_fail(k) {
  if
  :: FENCED_BY(k, REC) && pop == k + 1 -> pop = 0; kst[k] = K_DONE; kresp[k] = R_402; CHECK
  :: else -> skip
  fi
}

active proctype Reconciler() {
  byte k, fenced;
  bit r_cw;

end_rec:
  do
  /* C. Reconciler.claimUnfinished → Store.ClaimStale: IN_PROGRESS,
   *    reconcile_after and locked_until <= NOW(6) … FOR UPDATE SKIP LOCKED;
   *    UPDATE … SET lease_version = <new token>, locked_until = NOW(6) +
   *    lease. The claim's DB now is read here: r_cw, past may_send_until +
   *    CW (with the earlier not-found a window old: notFound's two proofs).
   * S. key.NothingSent() (send_attempts = sends_not_sent) → fail without a
   *    lookup (fenced; the counts cannot change under our token). */
  :: atomic {
       kst[0] == K_INPROG && !klive[0] -> k = 0;
       ktok[k] = REC; klive[k] = 1; r_cw = kcw[k];
       if
       :: kca[k] == kcns[k] -> r_fail(k); goto rdone
       :: else -> goto rlook
       fi
     }
  :: atomic {
       kst[1] == K_INPROG && !klive[1] -> k = 1;
       ktok[k] = REC; klive[k] = 1; r_cw = kcw[k];
       if
       :: kca[k] == kcns[k] -> r_fail(k); goto rdone
       :: else -> goto rlook
       fi
     }
#if EXPIRY
  /* reconcile expire → Store.ExpireAuthorizations, one transaction: SELECT …
   * WHERE capture_before <= NOW(6) AND status = 'requires_capture' AND
   * op_kind IS NULL … FOR UPDATE SKIP LOCKED; UPDATE payments SET status =
   * 'canceled', cancellation_reason = 'authorization_expired' WHERE … AND
   * status = 'requires_capture' AND op_kind IS NULL (AuthorizationExpired;
   * the PSP releases the hold at its own expiry). MUT_C_EXPIRE_INFLIGHT:
   * without op_kind IS NULL. */
#ifdef MUT_C_EXPIRE_INFLIGHT
  :: atomic { cbp && pst == P_AUTH -> status(P_CANC); CHECK }
#else
  :: atomic { cbp && pst == P_AUTH && pop == 0 -> status(P_CANC); CHECK }
#endif
#endif
  od;

rlook:
  /* S. operationSubject.lookup: the charge as it stands, ApplyOperation:
   *    captured or voided → its write; still authorized → ErrNotFound →
   *    Reconciler.notFound: failed (dropped) only past may_send_until + CW,
   *    twice a window apart (r_cw), else Store.Reschedule (locked_until =
   *    NOW(6)); the lookup fails → retry: Store.Reschedule. */
  if
  :: atomic { pc != C_AUTH -> settle_with(pc, pcap, REC, fenced); fenced = 0; goto rdone }
  :: atomic {
       pc == C_AUTH ->
       if
#ifdef MUT_C_NOWINDOW
       :: r_fail(k)                       /* dropped on the first not-found */
#else
       :: r_cw -> r_fail(k)
       :: !r_cw && FENCED_BY(k, REC) -> klive[k] = 0
       :: !r_cw && !FENCED_BY(k, REC) -> skip
#endif
       fi;
       goto rdone
     }
  :: atomic {
       skip;
       if
       :: FENCED_BY(k, REC) -> klive[k] = 0
       :: else -> skip
       fi;
       goto rdone
     }
  fi;

rdone:
  atomic { k = 0; r_cw = 0; goto end_rec }
}

init {
  atomic { run Worker(0); run Worker(1) }
}
