/*
 * refund.pml: two concurrent refunds of one succeeded payment, each with its
 * own idempotency key, checked by SPIN over every interleaving of their
 * client workers, the reconciler, a PSP that may lose, delay or refuse
 * refunds, and the database's clock.
 *
 * The refund protocol is the charge protocol (charge.pml) with one more
 * step: the claim reserves the refund's amount on the payment row under its
 * row lock (payments.amount_reserved counts pending + succeeded + in-review
 * refunds; amount_refunded the succeeded ones) in the transaction that
 * inserts the refund's key and row; a refund that ends failed gives its
 * reservation back in the statement that settles it. The refund order id is
 * f(merchant, payment, key); the PSP deduplicates on it. Go:
 * payments/refundflow.go (refundSubject), mysql/refund.go.
 *
 * Same conventions as charge.pml: relative time on the database's clock,
 * one atomic step per SQL transaction or compare-and-set, an answer joined
 * to the write it leads to, a lookup kept apart from the writes it decides.
 */

#ifndef AUTH
#define AUTH 1          /* the PSP's "no such refund" is authoritative */
#endif
#ifndef DEDUPE
#define DEDUPE 1        /* the PSP deduplicates on the refund order id (for ever) */
#endif
#ifndef DECL_RECORDED
#define DECL_RECORDED 0 /* the PSP keeps a declined refund (a repeat is declined again); psp.go: it does not */
#endif
#ifndef DECLINE_FIX
#define DECLINE_FIX 1   /* a decline settles failed only when no other send of the refund was authorised */
#endif
#ifndef REQS0
#define REQS0 2         /* requests refund 0's client sends with its key */
#endif
#ifndef REQS1
#define REQS1 1         /* requests refund 1's client sends with its key */
#endif
#define REQS (k == 0 -> REQS0 : REQS1)

#define L       3
#define T       2
#define HALF    1
#define CW      2
#ifndef MAXATT
#define MAXATT  1       /* the back-off path is the same as in charge.pml */
#endif
#define BACKOFF 1
#define NULLT   99
#define DLMIN   (HALF - 1)
#define AMOUNT  2       /* the payment's captured amount */
#ifndef AMT0
#define AMT0    1
#endif
#ifndef AMT1
#define AMT1    2
#endif

#define K_NONE   0
#define K_INPROG 1
#define K_DONE   2
#define R_NONE   0
#define R_PEND   1
#define R_SUCC   2      /* answered 201 */
#define R_FAIL   3      /* answered 402 (declined / failed) */
#define R_REV    4      /* answered 202 */
#define S_FREE   0
#define S_PEND   1
#define S_APPL   2      /* the refund moved money */
#define S_DECL   3      /* the PSP refused it: a result, no money moved */
#define S_DROP   4      /* NotProcessed */
#define REC      9
#define NSLOT    4

/* ---- the rows: payments.amount_refunded, and per refund k its key and row */
byte  reserved;         /* payments.amount_reserved */
byte  amt[2];           /* refunds.amount */
byte  rstatus[2];       /* refunds.status */
byte  kstate[2], ktok[2], kca[2], kcns[2], katt[2];
short klu[2], kmsu[2], kra[2];     /* locked_until, may_send_until, reconcile_after */
short knf[2] = NULLT;   /* not_found_at */

/* ---- the PSP's ledger: per refund order id */
byte  papplied[2];      /* refunds that moved money under that id */
byte  ptotal;           /* money refunded in all */
bit   pdecl[2];         /* DECL_RECORDED: the PSP remembers a declined one */
byte  slot[NSLOT], sid[NSLOT];     /* sends on the wire, and whose refund order id */
short sent[NSLOT];
bit   orphan[NSLOT];

/* ---- per client ---------------------------------------------------------- */
byte  tok[2];
short dl[2] = DLMIN;
bit   late[2], took[2];
byte  myslot[2], reqs[2];
byte  rtok;

/* ---- ghosts -------------------------------------------------------------- */
byte  holder[2];
bit   told_succ[2], told_fail[2], told_rev[2];
bit   p3_fence, p6_sum, p6_once, p6_truth;   /* always 0: name the property in pan's message */
hidden byte nt;

#define ID(k) (k)       /* refund order id = f(merchant, payment, key k); MUT_R_SHAREDID: f(merchant, payment) */
#ifdef MUT_R_SHAREDID
#undef ID
#define ID(k) 0
#endif

#define HELD(k) ((rstatus[k] == R_PEND || rstatus[k] == R_SUCC || rstatus[k] == R_REV) -> amt[k] : 0)
#define QUIET (slot[0] != S_PEND && slot[1] != S_PEND && slot[2] != S_PEND && slot[3] != S_PEND)
#define PAID(k) (rstatus[k] == R_SUCC -> amt[k] : 0)
/* p6 sum: the PSP never refunds more than the charge; the reservation is
 *   exactly what pending, succeeded and in-review refunds hold, and fits */
#define P6SUM (p6_sum || (ptotal <= AMOUNT && reserved == HELD(0) + HELD(1) && reserved <= AMOUNT))
/* p6 once: no refund order id moves money twice */
#define P6ONCE (p6_once || (papplied[0] <= 1 && papplied[1] <= 1))
/* p6 truth: an answer given is never contradicted (201: money moved; 402:
 *   none ever moves); once quiescent, the PSP's refunds are the succeeded ones */
#define TRUTH(k) ((!told_succ[k] || rstatus[k] == R_SUCC) && \
                  (!told_fail[k] || (rstatus[k] == R_FAIL && papplied[ID(k)] == 0)) && \
                  (!told_rev[k] || rstatus[k] == R_REV) && \
                  (!QUIET || rstatus[k] != R_SUCC || papplied[ID(k)] > 0) && \
                  (!QUIET || rstatus[k] != R_FAIL || papplied[ID(k)] == 0))
#define P6TRUTH (p6_truth || (TRUTH(0) && TRUTH(1) && \
  (!QUIET || kstate[0] != K_DONE || kstate[1] != K_DONE || rstatus[0] == R_REV || \
   rstatus[1] == R_REV || ptotal == PAID(0) + PAID(1))))
#define CHECK assert(P6SUM); assert(P6ONCE); assert(P6TRUTH)

#define MAX(a, b) ((a) > (b) -> (a) : (b))
#define DEC(v, lo) if :: v > (lo) -> v = v - 1 :: else -> skip fi
#define DECN(v, lo) if :: v != NULLT && v > (lo) -> v = v - 1 :: else -> skip fi
#define DECS(i) if :: slot[i] == S_PEND -> sent[i] = sent[i] - 1 :: else -> skip fi
#define INWIN(i) (slot[i] != S_PEND || sent[i] > 1 - CW)
#define FENCED_BY(k, t) (kstate[k] == K_INPROG && ktok[k] == (t))
#define APPLIED_BY(k, who) assert(p3_fence || holder[k] == (who))

inline fresh(k, t) {
  d_step {
    nt = 1;
    do
    :: (nt == ktok[k] || nt == tok[0] || nt == tok[1] || nt == rtok) -> nt++
    :: else -> break
    od;
    t = nt; nt = 0
  }
}

/* The refund completes: refundSubject.write → Store.SettleRefund, one
 * transaction (atomic, so one step here): UPDATE idempotency_keys SET
 * state = 'COMPLETED', response_… = … WHERE … AND lease_version = mine;
 * UPDATE refunds SET status = … WHERE … AND status = 'pending'; its event;
 * UPDATE payments SET amount_refunded = amount_refunded + (succeeded ?
 * amount : 0), amount_reserved = amount_reserved - (failed ? amount : 0).
 * 0 rows in a fenced UPDATE → rollback. */
inline complete(k, st) {
  kstate[k] = K_DONE; rstatus[k] = st;
#ifndef MUT_R_NORETURN
  if
  :: st == R_FAIL -> reserved = reserved - amt[k]      /* a failed refund gives its reservation back */
  :: else -> skip
  fi;
#endif
  klu[k] = 0; kra[k] = 0; kmsu[k] = -CW - 1; knf[k] = NULLT; kca[k] = 0; kcns[k] = 0; katt[k] = 0
}

inline tell(k, st) {
  if
  :: st == R_SUCC -> told_succ[k] = 1
  :: st == R_FAIL -> told_fail[k] = 1
  :: st == R_REV -> told_rev[k] = 1
  fi
}

inline free_slot(i) { slot[i] = S_FREE; sent[i] = 0; orphan[i] = 0; sid[i] = 0 }

inline new_slot(i, id) {
  if
  :: slot[0] == S_FREE -> i = 0
  :: else -> if
             :: slot[1] == S_FREE -> i = 1
             :: else -> if :: slot[2] == S_FREE -> i = 2 :: else -> i = 3 fi
             fi
  fi;
  assert(slot[i] == S_FREE);
  slot[i] = S_PEND; sent[i] = 0; sid[i] = id
}

/* ---- the PSP: Refund(refund order id, amount) ---------------------------- */
/* The PSP does not check the amount left on the charge itself: the
 * gateway's reservation is what the model tests. */
inline apply(i) {
  if
  :: DEDUPE && papplied[sid[i]] > 0 -> slot[i] = S_APPL        /* a repeat: the first refund */
  :: DEDUPE && DECL_RECORDED && pdecl[sid[i]] -> slot[i] = S_DECL
  :: else ->
       if
       :: papplied[sid[i]]++;
          ptotal = ptotal + amt[sid[i]];
          slot[i] = S_APPL
       :: pdecl[sid[i]] = DECL_RECORDED; slot[i] = S_DECL   /* refused: no money moved */
       fi
  fi;
  if :: orphan[i] -> free_slot(i) :: else -> skip fi;
  CHECK
}

#define PSP_ACT(i) \
  :: atomic { slot[i] == S_PEND -> apply(i) } \
  :: atomic { slot[i] == S_PEND -> if :: orphan[i] -> free_slot(i) :: else -> slot[i] = S_DROP fi }

active proctype PSP() {
end_psp:
  do
  PSP_ACT(0)
  PSP_ACT(1)
  PSP_ACT(2)
  PSP_ACT(3)
  od
}

active proctype Clock() {
end_clock:
  do
  :: atomic {
       INWIN(0) && INWIN(1) && INWIN(2) && INWIN(3) ->
       DEC(klu[0], 0); DEC(klu[1], 0); DEC(kra[0], 0); DEC(kra[1], 0);
       DEC(kmsu[0], -CW - 1); DEC(kmsu[1], -CW - 1); DECN(knf[0], -CW); DECN(knf[1], -CW);
       DECS(0); DECS(1); DECS(2); DECS(3);
       DEC(dl[0], DLMIN); DEC(dl[1], DLMIN)
     }
  od
}

/* ---- a refund's client: Service.Refund for key k ---------------------------- */
inline w_settle(st) {
  if
  :: FENCED_BY(k, tok[k]) && rstatus[k] == R_PEND ->
       APPLIED_BY(k, k); complete(k, st); tell(k, st); CHECK; goto end_done
  :: else -> goto join
  fi
}

inline w_release(notsent) {
  if
  :: FENCED_BY(k, tok[k]) -> APPLIED_BY(k, k); klu[k] = 0; kcns[k] = kcns[k] + notsent
  :: else -> skip
  fi;
  goto retry
}

#define CLAIMED \
  kstate[k] = K_INPROG; fresh(k, tok[k]); ktok[k] = tok[k]; holder[k] = k; \
  klu[k] = L; kmsu[k] = L; kra[k] = L; kca[k] = 1; kcns[k] = 0; knf[k] = NULLT; katt[k] = 0; \
  rstatus[k] = R_PEND; dl[k] = L; took[k] = 1; CHECK; \
  goto check

proctype Client(byte k) {
  byte s;

end_request:
  /* Service.Refund → Store.ClaimRefund: BEGIN; SELECT NOW(6); INSERT
   * idempotency_keys (IN_PROGRESS, token, locked_until = may_send_until =
   * reconcile_after = now + lease, send_attempts 1); SELECT … FROM payments
   * … FOR UPDATE; decide (amount_reserved + amount <= amount, else 422 and
   * ROLLBACK: nothing stored); UPDATE payments SET amount_reserved =
   * amount_reserved + ?; INSERT refunds (pending); COMMIT. Duplicate key →
   * the whole transaction rolls back → join. Under the row lock the read and
   * the write are one compare-and-set: one step. */
#ifdef MUT_R_NOCAS
  /* Mutant: the amount left is read by a plain SELECT, then reserved by a
   * blind UPDATE in the claim transaction (check-then-act). */
  atomic {
    reqs[k] < REQS -> reqs[k]++;
    if
    :: kstate[k] != K_NONE -> goto join
    :: kstate[k] == K_NONE && reserved + amt[k] > AMOUNT -> goto retry
    :: kstate[k] == K_NONE && reserved + amt[k] <= AMOUNT -> skip
    fi
  };
  atomic {
    skip;
    if
    :: kstate[k] != K_NONE -> goto join
    :: kstate[k] == K_NONE -> reserved = reserved + amt[k]; CLAIMED
    fi
  };
#else
  atomic {
    reqs[k] < REQS -> reqs[k]++;
    if
    :: kstate[k] != K_NONE -> goto join
    :: kstate[k] == K_NONE && reserved + amt[k] > AMOUNT -> goto retry   /* 422: more than is left */
    :: kstate[k] == K_NONE && reserved + amt[k] <= AMOUNT -> reserved = reserved + amt[k]; CLAIMED
    fi
  };
#endif

check:
  /* refundSubject.send (Service.sendTime): only while the local deadline has PSPTimeout/2 left,
   * else give the key back (Store.Release, not sent) → 503; then PSP
   * Refund(refund order id, amount) leaves the process. The stall between
   * the check and the write is charge.pml's business (PAUSE); here the
   * refund leaves at the check. */
  atomic {
    skip;
    if
    :: dl[k] >= HALF -> new_slot(s, ID(k)); myslot[k] = s; s = 0; goto wait
    :: else -> w_release(1)
    fi
  };

wait:
  /* The answer, and the write it leads to:
   * succeeded → refundSubject.settle → Store.SettleRefund succeeded (keeps the reservation) → 201;
   * declined → settled failed, the reservation given back → 402
   *   (DECLINE_FIX: only when every other authorised send certainly did
   *   nothing, send_attempts = sends_not_sent + 1 in the WHERE; otherwise one
   *   more send that did nothing: Store.Release, not sent → 503);
   * NotProcessed → Store.Release, not sent → 503;
   * Unknown → Store.Release → 502. */
  if
  :: atomic { slot[myslot[k]] == S_APPL -> free_slot(myslot[k]); myslot[k] = 0; w_settle(R_SUCC) }
  :: atomic {
       slot[myslot[k]] == S_DECL -> free_slot(myslot[k]); myslot[k] = 0;
#if DECLINE_FIX
       if
       :: kca[k] == kcns[k] + 1 -> w_settle(R_FAIL)
       :: else -> w_release(1)
       fi
#else
       w_settle(R_FAIL)
#endif
     }
  :: atomic { slot[myslot[k]] == S_DROP -> free_slot(myslot[k]); myslot[k] = 0; w_release(1) }
  :: atomic {
       skip;
       if
       :: slot[myslot[k]] == S_PEND -> orphan[myslot[k]] = 1
       :: else -> free_slot(myslot[k])
       fi;
       myslot[k] = 0;
       w_release(0)
     }
  fi;

join:
  /* Store.Record, then Store.TakeOver (one step, as in charge.pml). */
  if
  :: atomic { kstate[k] == K_DONE -> tell(k, rstatus[k]); CHECK; goto end_done }
  :: atomic {
       kstate[k] == K_INPROG && klu[k] <= 0 && !took[k] ->
       took[k] = 1; fresh(k, tok[k]); ktok[k] = tok[k]; holder[k] = k; klu[k] = L;
       late[k] = (kmsu[k] + CW < 0);
       goto resume
     }
  fi;

resume:
  /* refundSubject.resume: PSP LookupRefund(refund order id) first
   * (MUT_R_NOLOOKUP: not at all). found → settle with it; not found and
   * MayChargeAgain (the PSP dedupes refund order ids; or the lookup is
   * authoritative and db now > may_send_until + CW) → Service.arm; otherwise
   * → Store.Release → 502. */
#ifdef MUT_R_NOLOOKUP
  goto arm;
#endif
  if
  :: atomic { papplied[ID(k)] > 0 -> w_settle(R_SUCC) }
  :: atomic { (papplied[ID(k)] == 0 || !AUTH) && (DEDUPE || (AUTH && late[k])) -> goto arm }
  :: atomic { skip; w_release(0) }
  fi;

arm:
  /* Service.arm → Store.ArmCharge (the same statement as a charge's):
   * UPDATE idempotency_keys SET may_send_until = GREATEST(…, NOW(6) +
   * PSPTimeout), send_attempts + 1, not_found_at = NULL WHERE … AND
   * lease_version = mine. */
  atomic {
    skip;
    if
    :: FENCED_BY(k, tok[k]) ->
         APPLIED_BY(k, k); kmsu[k] = MAX(kmsu[k], T); klu[k] = MAX(klu[k], T); kca[k]++; knf[k] = NULLT;
         dl[k] = T; goto check
    :: else -> goto join
    fi
  };

retry:
  atomic { tok[k] = 0; dl[k] = DLMIN; late[k] = 0; myslot[k] = 0; took[k] = 0; goto end_request }

end_done:
  atomic { tok[k] = 0; dl[k] = DLMIN; late[k] = 0; myslot[k] = 0; took[k] = 0 }
}

/* ---- the reconciler, for refund keys ------------------------------------- */
inline r_settle(st) {
  if
  :: FENCED_BY(rk, rtok) && rstatus[rk] == R_PEND -> APPLIED_BY(rk, REC); complete(rk, st); CHECK
  :: else -> skip
  fi;
  goto rdone
}

inline r_reschedule(after) {
  if
  :: FENCED_BY(rk, rtok) -> APPLIED_BY(rk, REC); klu[rk] = 0; kra[rk] = after
  :: else -> skip
  fi;
  goto rdone
}

active proctype Reconciler() {
  byte rk;
  bit r_dmsu, r_nfnull, r_dnf;
  byte r_att;

end_claim:
  /* Store.ClaimStale over refund keys (FOR UPDATE SKIP LOCKED, new token,
   * lease), any stale one; every authorised send did nothing → failed. */
  atomic {
    if
    :: kstate[0] == K_INPROG && kra[0] <= 0 && klu[0] <= 0 -> rk = 0
    :: kstate[1] == K_INPROG && kra[1] <= 0 && klu[1] <= 0 -> rk = 1
    fi;
    fresh(rk, rtok); ktok[rk] = rtok; holder[rk] = REC; klu[rk] = L; kra[rk] = L;
    r_dmsu = (kmsu[rk] + CW > 0);
    r_nfnull = (knf[rk] == NULLT);
    r_dnf = (knf[rk] != NULLT && knf[rk] + CW > 0);
    r_att = katt[rk];
    if
    :: kca[rk] == kcns[rk] -> r_settle(R_FAIL)
    :: else -> skip
    fi
  };

  /* PSP LookupRefund, and what follows */
  if
  :: atomic { papplied[ID(rk)] > 0 -> r_settle(R_SUCC) }
  :: atomic {
       AUTH && papplied[ID(rk)] == 0 ->
       if
       :: r_dmsu -> r_reschedule(kmsu[rk] + CW)
       :: !r_dmsu && r_nfnull -> goto rrecord
       :: !r_dmsu && !r_nfnull && r_dnf -> r_reschedule(knf[rk] + CW)
       :: !r_dmsu && !r_nfnull && !r_dnf -> goto rfail
       fi
     }
  :: atomic {
       skip;
       if
       :: r_att + 1 >= MAXATT -> r_settle(R_REV)
       :: r_att + 1 < MAXATT ->
            if
            :: FENCED_BY(rk, rtok) -> APPLIED_BY(rk, REC); katt[rk] = r_att + 1; klu[rk] = 0; kra[rk] = BACKOFF
            :: else -> skip
            fi;
            goto rdone
       fi
     }
  fi;

rrecord:
  atomic {
    skip;
    if
    :: FENCED_BY(rk, rtok) -> APPLIED_BY(rk, REC); knf[rk] = 0; kra[rk] = CW; klu[rk] = 0
    :: else -> skip
    fi;
    goto rdone
  };

rfail:
  atomic { skip; r_settle(R_FAIL) };

rdone:
  atomic { rk = 0; r_dmsu = 0; r_nfnull = 0; r_dnf = 0; r_att = 0; rtok = 0; goto end_claim }
}

init {
  /* refunds of 1 and of 2 against a charge of 2: either fits, not both,
   * unless the other one failed and gave its reservation back */
  atomic {
    amt[0] = AMT0; amt[1] = AMT1;
    run Client(0); run Client(1)
  }
}

/* every refund that was claimed eventually completes: pan -a -f */
ltl p6live { [] (((kstate[0] == K_INPROG) -> <> (kstate[0] == K_DONE)) &&
                 ((kstate[1] == K_INPROG) -> <> (kstate[1] == K_DONE))) }
