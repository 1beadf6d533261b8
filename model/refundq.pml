/*
 * refundq.pml: the reconciler's refund queue (refunds pending at their PSP
 * or in review, looked at again on a back-off), checked by SPIN over every
 * interleaving of the reconciler, a PSP that settles each refund at a
 * moment of its own, and the database's clock. Three refunds wait, all due;
 * refund 0 cannot be read: its row cannot be decoded (its metadata is not
 * JSON), or its payment's row cannot, or is missing (refundCheck treats
 * them alike).
 * Go: mysql/refund.go (ClaimRefundChecks, refundCheck,
 * RescheduleRefundCheck), reconcile/refunds.go (claimRefundChecks,
 * recheckRefund, refundLater, resolveRefund).
 *
 * ORDER BY review_after is kept exactly: the due refunds stand in a line in
 * the order they fell due (the clock appends a refund when its
 * review_after passes), and a claim takes the head of the line. A claimed
 * refund's look is one step: the PSP's answer and the write it leads to.
 *
 * MUT_Q_ERR is a claim that returns the reading's error and rolls back, as
 * ClaimRefundChecks did for a refund whose payment it could not read: the
 * unreadable refund stays at the head of the line, in every batch.
 */

#define NR    3
#define LIM   2         /* refunds one claim takes (the batch) */
#define LEASE 2         /* the mark a claimed refund's next look waits for */
#define BACKOFF 1       /* the PSP still holds it pending: the next look */
#define DAY   3         /* a refund that cannot be read is set aside until then */

#define R_PEND 0        /* pending at its PSP, or in review: the queue's */
#define R_SUCC 1
#define R_FAIL 2

byte  st[NR];           /* refunds.status */
byte  ra[NR];           /* review_after, relative: ticks until due; 0: due (in the line), or claimed */
bit   claimed[NR];      /* marked by a claim, its look not written yet */
byte  line[NR];         /* the due refunds, in review_after order (refund + 1; 0 empty) */
byte  nline = NR;
byte  pst[NR];          /* what the PSP holds: pending, succeeded, failed */

/* refundCheck: the refund, or its payment, cannot be read */
#define UNREADABLE(r) ((r) == 0)

/* take line[i] out of the line */
inline unline(i) {
  line[i] = 0;
  if
  :: i == 0 -> line[0] = line[1]; line[1] = line[2]; line[2] = 0
  :: i == 1 -> line[1] = line[2]; line[2] = 0
  :: i == 2 -> skip
  fi;
  nline--
}

/* the clock appends a refund to the line when it falls due */
#define TICK(r) if :: st[r] == R_PEND && !claimed[r] && ra[r] > 0 -> ra[r]--; \
                     if :: ra[r] == 0 -> line[nline] = r + 1; nline++ :: else -> skip fi \
                   :: else -> skip fi

active proctype Clock() {
end_clock:
  do
  :: atomic { TICK(0); TICK(1); TICK(2) }
  od
}

/* the PSP settles each refund of the gateway's once (refund 0's too) */
active proctype PSP() {
end_psp:
  do
  :: atomic { pst[0] == R_PEND -> if :: pst[0] = R_SUCC :: pst[0] = R_FAIL fi }
  :: atomic { pst[1] == R_PEND -> if :: pst[1] = R_SUCC :: pst[1] = R_FAIL fi }
  :: atomic { pst[2] == R_PEND -> if :: pst[2] = R_SUCC :: pst[2] = R_FAIL fi }
  od
}

proctype Reconciler() {
  byte i, n, r;
  bit abort;

end_claim:
  /* ClaimRefundChecks: SELECT … FROM refunds WHERE status IN ('pending',
   * 'requires_review') AND review_after <= NOW(6) ORDER BY review_after
   * LIMIT ? FOR UPDATE SKIP LOCKED; refundCheck reads each row and its
   * payment: one that cannot be read is set aside (review_after a day on,
   * handed to the pass as quarantined) and the others go on; each other one
   * is marked (review_after = now + lease). One transaction: one step. */
  atomic {
    nline > 0 ->
    n = (nline < LIM -> nline : LIM);
    abort = 0; i = 0;
    do
    :: i < n ->
         r = line[i] - 1;
#ifdef MUT_Q_ERR
         /* Mutant: the error is returned, and the transaction rolls back. */
         if :: UNREADABLE(r) -> abort = 1 :: else -> skip fi;
#endif
         i++
    :: else -> break
    od;
    if
    :: abort -> skip    /* rolled back: nothing claimed, nothing set aside */
    :: else ->
         i = 0;
         do
         :: i < n ->
              r = line[0] - 1; unline(0);
              if
              :: UNREADABLE(r) -> ra[r] = DAY
              :: else -> claimed[r] = 1; ra[r] = LEASE
              fi;
              i++
         :: else -> break
         od
    fi;
    i = 0; n = 0; r = 0; abort = 0
  };

  /* recheckRefund for each claimed one: LookupRefund, and the write it
   * leads to, fenced on the mark: resolveRefund (settled) or refundLater
   * (RescheduleRefundCheck: still pending, the next look after the back-off). */
  do
  :: atomic {
       claimed[0] || claimed[1] || claimed[2] ->
       if
       :: claimed[0] -> r = 0
       :: claimed[1] -> r = 1
       :: claimed[2] -> r = 2
       fi;
       if
       :: pst[r] != R_PEND -> st[r] = pst[r]; ra[r] = 0
       :: else -> ra[r] = BACKOFF
       fi;
       claimed[r] = 0; r = 0
     }
  :: atomic { !claimed[0] && !claimed[1] && !claimed[2] -> goto end_claim }
  od
}

init {
  atomic { line[0] = 1; line[1] = 2; line[2] = 3; run Reconciler() }
}

/* p10 live: every refund that can be read is settled once its PSP has
 * settled it (weak fairness), whatever refund cannot be */
ltl p10live { <> (st[1] != R_PEND && st[2] != R_PEND) }
