package model

import "slices"

// The checks. Every configuration below is a world that the checker
// explores completely; README.md explains the bounds. Charge worlds: client
// 1 sends one request, client 2 two (a retry, late or not, and its retry),
// plus the reconciler. Refund worlds: refund 0's client sends two requests,
// refund 1's one, plus the reconciler. Capture worlds: two operation keys
// on one authorization, each client with a retry, plus the reconciler.
// Cancel-by-key worlds: the canceled key's request and a late duplicate of
// it, one cancellation, plus the reconciler. Attempt worlds: one payment
// routed to accounts A then B, client 1's request and client 2's, plus the
// reconciler (the key, the check of the earlier attempt, the review queue).

// protocol is the charge protocol as main implements it: with declines,
// permanent request errors and ArmCharge failing without landing,
// payments.MayChargeAgain's rule (dedupe age with PSPTimeout + creation
// window to spare), and the fixes of the model's findings (README,
// "Findings": a rejection settles failed only when no other send was
// authorised; ArmCharge re-checks the dedupe window with room for the new
// charge to land; a failed ArmCharge does not count a send as not sent).
var protocol = []string{"-DDECLINES=1", "-DREJECTS=1", "-DREJECT_FIX=1", "-DLMARGIN=T+CW", "-DDWGUARD=1", "-DARMFAIL=1", "-DARMFAIL_FIX=1"}

func with(base []string, more ...string) []string {
	return append(append([]string(nil), base...), more...)
}

// twoCaptures is the capture world with key 1 a capture too: 2 and 1 of
// the authorization of 2.
var twoCaptures = []string{"-DKIND1=1", "-DAMT0=2", "-DAMT1=1"}

// Attempt worlds (attempts.pml), with main's protocol: the fixes of
// findings 5-8 are the model's defaults (TOKEN_FIX, WAIT_FIX, REF_FIX,
// PERSON_FIX). lyingPSP: account A answers "not processed" once and may
// charge anyway; noCheckPause: the attempt check records what it found
// before the review queue's first look at the payment it sent to review
// (ReviewFirstLook, 5 min: without it gap 9 opens, README "Gaps"). The
// mutants, findings and gaps run with noJoinStall (no worker stalls between
// the join's reads and TakeOver), the smaller world they need.
var (
	noJoinStall  = []string{"-DJOINSTALL=0"}
	lyingPSP     = []string{"-DLIAR=1"}
	noCheckPause = with(lyingPSP, "-DCHECKPAUSE=0")
	lyingSmall   = with(noJoinStall, "-DLIAR=1", "-DREQS2=0")
)

var (
	agree = []string{"p2_agree", "p4_answers"}
	once  = []string{"p1_once"}
	fence = []string{"p3_fence"}
)

// Suite returns the checks. The full suite is what `make model` runs; quick
// is what go test runs: the checks marked Quick, in smaller charge worlds
// (client 2 sends one request) and capture worlds (key 1's client sends one).
func Suite(quick bool) []Check {
	c := []Check{
		// Properties that must hold.
		{Name: "charge/stall-past-margin", Model: "charge.pml", Flags: with(protocol, "-DPAUSE=2"),
			What: "p1-p4 with a stall of T/2+1 between the deadline check and the write"},
		{Name: "charge/auth+dedupe", Model: "charge.pml", Flags: protocol,
			What: "p1-p4, authoritative lookup, PSP dedupes for ever (the fake PSP, Toss)"},
		{Name: "charge/auth", Model: "charge.pml", Flags: with(protocol, "-DDEDUPE=0"),
			What: "p1-p4, authoritative lookup, no dedupe: charges again only after the window"},
		{Name: "charge/lookup-proves-nothing", Model: "charge.pml", Flags: with(protocol, "-DAUTH=0"),
			Quick: true,
			What:  "p1-p4, non-authoritative lookup with dedupe (Stripe): never failed, review instead"},
		{Name: "charge/lookup-proves-nothing-no-dedupe", Model: "charge.pml", Flags: with(protocol, "-DAUTH=0", "-DDEDUPE=0"),
			What: "p1-p4, non-authoritative lookup, no dedupe"},
		{Name: "charge/dedupe-window", Model: "charge.pml", Flags: with(protocol, "-DDW=6"),
			What: "p1-p4, dedupe memory of 6 ticks, authoritative lookup, ArmCharge re-checks the age"},
		{Name: "charge/dedupe-window-lookup-proves-nothing", Model: "charge.pml", Flags: with(protocol, "-DDW=6", "-DAUTH=0"),
			What: "p1-p4, dedupe memory of 6 ticks, non-authoritative lookup (Stripe: 24 h, search)"},
		{Name: "charge/stall-past-margin-no-dedupe", Model: "charge.pml", Flags: with(protocol, "-DPAUSE=2", "-DDEDUPE=0"),
			What: "the same on a PSP that does not dedupe"},
		{Name: "charge/failover", Model: "charge.pml", Flags: with(protocol, "-DFAILOVER=1", "-DREQS2=1"),
			What: "p1-p4 when a failover loses a lease grant: fresh tokens keep p3"},
		{Name: "charge/p5-auth+dedupe", Model: "charge.pml", LTL: "p5",
			Flags: []string{"-DCRASH=1", "-DRCRASH=1", "-DREQS2=1"},
			What:  "p5: every key leaves IN_PROGRESS, workers and reconciler crash at any step"},
		{Name: "charge/p5-auth", Model: "charge.pml", LTL: "p5",
			Flags: []string{"-DCRASH=1", "-DRCRASH=1", "-DREQS2=1", "-DDEDUPE=0"},
			What:  "p5 without dedupe"},
		{Name: "charge/p5-lookup-proves-nothing", Model: "charge.pml", LTL: "p5",
			Flags: []string{"-DCRASH=1", "-DRCRASH=1", "-DREQS2=1", "-DAUTH=0"},

			What: "p5 when no lookup proves anything: requires_review ends it"},
		{Name: "refund/1+2-of-2", Model: "refund.pml",
			What: "p6: refunds of 1 and 2 against a charge of 2: never both, reservations exact"},
		{Name: "refund/1+1-of-2", Model: "refund.pml", Flags: []string{"-DAMT1=1", "-DREQS0=1"},
			What: "p6: refunds of 1 and 1: both may succeed, concurrently"},
		{Name: "refund/no-dedupe", Model: "refund.pml", Flags: []string{"-DDEDUPE=0"},
			What: "p6 on a PSP that does not dedupe refund order ids"},
		{Name: "refund/lookup-proves-nothing", Model: "refund.pml", Flags: []string{"-DAUTH=0"},
			Quick: true,
			What:  "p6 with a non-authoritative refund lookup"},
		{Name: "refund/p6-live", Model: "refund.pml", LTL: "p6live", Flags: []string{"-DREQS0=1"},
			Quick: true,
			What:  "every claimed refund completes under weak fairness"},
		{Name: "notice/payment", Model: "notice.pml", Quick: true,
			What: "p7: a notification contradicting a payment's final answer sends it to review; none overwrites one"},
		{Name: "notice/refund", Model: "notice.pml", Flags: []string{"-DREFUND=1"}, Quick: true,
			What: "p7 for a refund: reported succeeded while recorded failed → review, its amount reserved again"},
		{Name: "notice/declines-not-final-redecided", Model: "notice.pml", Flags: []string{"-DDECLFINAL=0", "-DREDECIDE=1"}, Quick: true,
			What: "p7 when a reported decline is not final at the PSP, with a fenced write deciding again (not on main)"},
		{Name: "eventlog/listing", Model: "eventlog.pml", Quick: true,
			What: "p8: a consumer paging GET /events with its cursor lists every event once, never passes one"},
		{Name: "eventlog/galera", Model: "eventlog.pml", Flags: []string{"-DGALERA=1"}, Quick: true,
			What: "p8 with the two listings on two Galera nodes: no lock across them, certification instead"},
		{Name: "delivery/purge", Model: "delivery.pml", Quick: true,
			What: "p9: the purge takes no event a delivery still needs; only a resend's orphan fails for its event"},
		{Name: "delivery/p9-live", Model: "delivery.pml", LTL: "p9live", Quick: true,
			What: "p9 live: every pending delivery ends (delivered or failed), an orphan among them"},
		{Name: "refundq/p10-live", Model: "refundq.pml", LTL: "p10live", Quick: true,
			What: "p10: a refund that cannot be read is set aside and every other refund in the queue is settled"},
		{Name: "capture/capture+void", Model: "capture.pml", Quick: true,
			What: "p11: a partial capture and a void of one authorization, which the PSP may let lapse: one wins, at the PSP and in the rows"},
		{Name: "capture/two-captures", Model: "capture.pml", Flags: with(twoCaptures, "-DREQS1=1"),
			What: "p11: two captures of one authorization (2 and 1 of 2), key 0 with a retry: one capture order id reaches the PSP"},
		{Name: "capture/expiry", Model: "capture.pml", Flags: []string{"-DEXPIRY=1", "-DREQS1=1"},
			What: "p11 with capture_before passing: the reconciler expires only an authorization with no operation in flight"},
		{Name: "cancelkey/manual", Model: "cancelkey.pml", Quick: true,
			What: "p12: cancel-by-key of an authorizing key against its request, a late duplicate and the reconciler: voided, or nothing charged"},
		{Name: "cancelkey/automatic", Model: "cancelkey.pml", Flags: []string{"-DMANUAL=0"},
			What: "p12 for a charge that takes the money at once: refunded in full, or nothing charged"},
		{Name: "attempts/two-accounts", Model: "attempts.pml", Quick: true,
			What: "p13: failover from account A to B only after a certain not-processed; two workers (one stalls between the join's reads and TakeOver), the reconciler, its check of attempt 1, the review queue"},
		{Name: "attempts/lying-psp", Model: "attempts.pml", Flags: with(noCheckPause, "-DRCRASH=0"), Quick: true,
			What: "p13_net, p13_kept, p13_agree: A answers not processed and charges anyway; the check refunds the extra charge or sends the payment to review, the review queue leaves it to a person"},
		{Name: "attempts/lying-psp-stopped-checks", Model: "attempts.pml", Flags: with(noCheckPause, "-DDECLINES=0"), Quick: true,
			What: "the same with checks that stop between their steps, and no declines (gap 8)"},
		{Name: "attempts/lying-psp-whole-world", Model: "attempts.pml", Flags: lyingPSP,
			What: "the lying PSP in the whole world: declines, unknown lookups, checks that stop or pause between their steps, the review queue; the check's review and record are one transaction (Store.ReviewAttempt)"},

		// The protocol before each finding's fix: each must produce its
		// counter-example, so undoing a fix on main is caught (README, "Findings").
		{Name: "fixed/rejected-settles-failed", Model: "charge.pml", Flags: []string{"-DREJECTS=1"}, Expect: agree,
			What: "protocol §3 as written: a permanent request error settles failed while another send lands"},
		{Name: "fixed/dedupe-margin-without-creation-window", Model: "charge.pml",
			Flags: []string{"-DDW=6", "-DAUTH=0", "-DDWGUARD=1", "-DDWMARGIN=T"}, Expect: once,
			What: "MayChargeAgain's margin (PSPTimeout) even re-checked at ArmCharge: the new charge lands past the window"},
		{Name: "fixed/dedupe-judged-before-arm", Model: "charge.pml", Flags: []string{"-DDW=6", "-DAUTH=0", "-DLMARGIN=T+CW"}, Expect: once,
			What: "the dedupe age judged at the lookup, with the right margin: a stall before ArmCharge outlasts it"},
		{Name: "fixed/arm-error-counted-not-sent", Model: "charge.pml", Flags: []string{"-DARMFAIL=1"}, Expect: agree,
			What: "Service.arm releases with notSent after an ArmCharge that did not land: failed without a lookup while charged"},
		{Name: "fixed/refund-decline-settles-failed", Model: "refund.pml", Flags: []string{"-DDECLINE_FIX=0"}, Expect: []string{"p6_truth", "p6_sum"},
			What: "a declined refund settles failed while an earlier send of its refund order id lands"},
		{Name: "fixed/attempts-takeover-resends-the-one-failed-over", Model: "attempts.pml",
			Flags: []string{"-DTOKEN_FIX=0", "-DREVIEWQ=0", "-DRUNKNOWN=0", "-DRCRASH=0", "-DDECLINES=0", "-DFOERR=0", "-DBREAKER=0"}, Expect: []string{"p13_once", "p13_kept", "p13_answers", "p13_agree"},
			What: "Store.Failover keeps the token: a takeover that read the payment before the failover passes TakeOver and sends attempt 1 again at A"},
		{Name: "fixed/attempts-charged-beside-an-unknown-one", Model: "attempts.pml", Flags: with(lyingSmall, "-DWAIT_FIX=0", "-DRCRASH=0", "-DREVIEWQ=0"), Expect: []string{"p13_net"},
			What: "chargedElsewhere takes a payment in review without a reference for no other charge: attempt 1's is kept while attempt 2's lands"},
		{Name: "fixed/attempts-recheck-refunds-the-payments-money", Model: "attempts.pml", Flags: with(lyingSmall, "-DREF_FIX=0", "-DREVIEW_TX=0", "-DRUNKNOWN=0", "-DREVIEWQ=0", "-DDECLINES=0"), Expect: []string{"p13_kept"},
			What: "the check's review puts attempt 1's charge on the payment; stopped before its record, the next check refunds it as another attempt's extra"},
		{Name: "fixed/attempts-recheck-refunds-beside-a-decline", Model: "attempts.pml", Flags: with(lyingSmall, "-DREVIEW_TX=0", "-DRUNKNOWN=0", "-DREVIEWQ=0"), Expect: []string{"p13_kept"},
			What: "review and record as two writes: attempt 2 declined, attempt 1 charged anyway, the check stops between them, the next reads the decline's reference as the payment's money and refunds the only charge"},
		{Name: "fixed/attempts-review-queue-settles-before-the-record", Model: "attempts.pml", Flags: with(lyingSmall, "-DREVIEW_TX=0", "-DRUNKNOWN=0", "-DRCRASH=0"), Expect: []string{"p13_agree"},
			What: "review and record as two writes: the check pauses between them, the review queue, reading no charged attempt yet, settles the payment failed or declined beside A's charge"},
		{Name: "fixed/attempts-review-queue-undoes-the-review", Model: "attempts.pml", Flags: with(lyingSmall, "-DPERSON_FIX=0", "-DRUNKNOWN=0", "-DRCRASH=0", "-DCHECKPAUSE=0"), Expect: []string{"p13_agree"},
			What: "the review queue settles a payment whose attempt 1 is charged by its current attempt alone: failed or declined beside A's charge"},

		// Mutants: each must be caught.
		{Name: "mutant/settle-without-token-fence", Model: "charge.pml", Flags: []string{"-DMUT_NOFENCE"}, Expect: fence,
			What: "Store.Settle without lease_version in its WHERE"},
		{Name: "mutant/resume-charges-without-lookup", Model: "charge.pml", Flags: []string{"-DMUT_NOLOOKUP", "-DDEDUPE=0"}, Expect: once,
			What: "resume charges again without looking the order up first"},
		{Name: "mutant/failed-without-window", Model: "charge.pml", Flags: []string{"-DMUT_NOWINDOW"}, Expect: agree,
			What: "the reconciler settles failed on the first authoritative not-found"},
		{Name: "mutant/failed-after-one-lookup", Model: "charge.pml", Flags: []string{"-DMUT_ONELOOKUP", "-DPAUSE=2"}, Expect: agree,
			What: "failed after one not-found past may_send_until+CW, while a stalled send can still land"},
		{Name: "mutant/takeover-on-skewed-clock", Model: "charge.pml", Flags: []string{"-DMUT_SKEW_TAKEOVER", "-DDEDUPE=0", "-DREQS2=1"}, Expect: once,
			What: "a worker whose clock runs ahead judges the lease expired and takes a live one"},
		{Name: "mutant/reconciler-on-skewed-clock", Model: "charge.pml", Flags: []string{"-DMUT_SKEW_REC"}, Expect: agree,
			What: "the reconciler judges expiry and windows on a clock that runs ahead"},
		{Name: "mutant/lease-written-by-slow-clock", Model: "charge.pml", Flags: []string{"-DMUT_SKEW_CLAIM", "-DREQS2=1"}, Expect: agree,
			What: "the claim writes locked_until/may_send_until from a clock that runs behind"},
		{Name: "mutant/reconciler-charges", Model: "charge.pml", Flags: []string{"-DMUT_REC_CHARGES", "-DDEDUPE=0"}, Expect: once,
			What: "the reconciler charges again instead of settling failed"},
		{Name: "mutant/token-counter-only", Model: "charge.pml", Flags: []string{"-DMUT_TOKEN_COUNTER", "-DFAILOVER=1"}, Expect: fence,
			What: "lease_version + 1 as the token, and a failover that loses a grant"},
		{Name: "mutant/no-review", Model: "charge.pml", LTL: "p5", Flags: []string{"-DMUT_NOREVIEW", "-DAUTH=0", "-DREQS2=1"}, Expect: []string{"p5"},
			What: "the reconciler never hands a key it cannot decide to review"},
		{Name: "mutant/refund-reserve-check-then-act", Model: "refund.pml", Flags: []string{"-DMUT_R_NOCAS"}, Expect: []string{"p6_sum"},
			What: "the refund's reservation read by a plain SELECT, then written"},
		{Name: "mutant/refund-id-without-key", Model: "refund.pml", Flags: []string{"-DMUT_R_SHAREDID"}, Expect: []string{"p6_truth", "p6_once"},
			What: "refund order id derived from (merchant, payment) only"},
		{Name: "mutant/refund-failed-keeps-reservation", Model: "refund.pml", Flags: []string{"-DMUT_R_NORETURN"}, Expect: []string{"p6_sum"},
			What: "a failed refund does not give its reservation back"},
		{Name: "mutant/refund-resume-without-lookup", Model: "refund.pml", Flags: []string{"-DMUT_R_NOLOOKUP", "-DDEDUPE=0"}, Expect: []string{"p6_once", "p6_sum"},
			What: "a resumed refund is sent again without looking it up"},
		{Name: "mutant/notice-contradiction-only-logged", Model: "notice.pml", Flags: []string{"-DMUT_N_IGNORE"}, Expect: []string{"p7_truth"},
			What: "before the fix: a notification contradicting a final answer is logged and changes nothing"},
		{Name: "mutant/refund-notice-only-logged", Model: "notice.pml", Flags: []string{"-DREFUND=1", "-DMUT_N_IGNORE"}, Expect: []string{"p7_truth"},
			What: "the same for a refund recorded failed that the PSP carried out"},
		{Name: "mutant/notice-overwrites-final-answer", Model: "notice.pml", Flags: []string{"-DMUT_N_OVERWRITE"}, Expect: []string{"p7_answer"},
			What: "the PSP's report written over a final answer instead of sending it to review"},
		{Name: "mutant/notice-failure-reviews-success", Model: "notice.pml", Flags: []string{"-DMUT_N_FAILREVIEW"}, Expect: []string{"p7_answer"},
			What: "any differing report sends a final answer to review, a stale decline against a success too"},
		{Name: "mutant/notice-write-without-status-check", Model: "notice.pml", Flags: []string{"-DMUT_N_NOCAS"}, Expect: []string{"p7_answer", "p7_truth"},
			What: "Resolve writes the decision without checking the status it was made on"},
		{Name: "mutant/events-paged-on-insert-pos", Model: "eventlog.pml", Flags: []string{"-DMUT_E_INSERTPOS"}, Expect: []string{"p8_cursor"},
			What: "before migration 13: GET /events pages on pos, taken at insert time, and passes a late commit"},
		{Name: "mutant/events-placed-before-commit", Model: "eventlog.pml", Flags: []string{"-DMUT_E_PLACEOPEN"}, Expect: []string{"p8_cursor"},
			What: "LogEvents places an event whose transaction is still open"},
		{Name: "mutant/purge-ignores-pending-deliveries", Model: "delivery.pml", Flags: []string{"-DMUT_D_PURGEPENDING"}, Expect: []string{"p9_lost"},
			What: "PurgeEvents by age alone: a pending delivery's event is purged and the delivery fails undelivered"},
		{Name: "mutant/delivery-claim-fails-on-gone-event", Model: "delivery.pml", LTL: "p9live", Flags: []string{"-DMUT_D_CLAIMERR"}, Expect: []string{"p9live"},
			What: "ClaimDeliveries fails the whole claim on a delivery whose event is gone: the endpoint wedges"},
		{Name: "mutant/refund-check-claim-fails-on-bad-row", Model: "refundq.pml", LTL: "p10live", Flags: []string{"-DMUT_Q_ERR"}, Expect: []string{"p10live"},
			What: "ClaimRefundChecks returns an unreadable refund's (or payment's) error and rolls back: no refund is checked again"},
		{Name: "mutant/capture-without-compare-and-set", Model: "capture.pml", Flags: with(twoCaptures, "-DREQS1=1", "-DMUT_C_NOCAS"), Expect: []string{"p11_once", "p11_agree"},
			What: "ClaimOperation reads the payment without its lock and sets the operation without op_kind IS NULL: two captures"},
		{Name: "mutant/void-after-capture", Model: "capture.pml", Flags: []string{"-DREQS1=1", "-DMUT_C_UNLOCKED"}, Expect: []string{"p11_excl"},
			What: "a void's claim decides on the payment read before its row lock: sent after the capture settled"},
		{Name: "mutant/expiry-of-an-operation-in-flight", Model: "capture.pml", Flags: []string{"-DEXPIRY=1", "-DMUT_C_EXPIRE_INFLIGHT"}, Expect: []string{"p11_excl"},
			What: "ExpireAuthorizations without op_kind IS NULL: expired, then the capture in flight settles it captured"},
		{Name: "mutant/capture-order-id-per-attempt", Model: "capture.pml", Flags: []string{"-DMUT_C_FRESHID"}, Expect: []string{"p11_once"},
			What: "the capture's order id (the PSP's idempotency key) made per attempt: a resume's capture is a second one"},
		{Name: "mutant/capture-dropped-without-window", Model: "capture.pml", Flags: with(twoCaptures, "-DMUT_C_NOWINDOW"), Expect: []string{"p11_agree", "p11_once"},
			What: "the reconciler drops a stale capture on the first lookup that finds the charge authorized: it lands after its 402"},
		{Name: "mutant/capture-above-authorization", Model: "capture.pml", Flags: []string{"-DMUT_C_NOLIMIT", "-DAMT0=3"}, Expect: []string{"p11_cap"},
			What: "NewOperation does not hold amount_to_capture to the authorization, and the PSP takes it"},
		{Name: "mutant/late-duplicate-after-cancel", Model: "cancelkey.pml", Flags: []string{"-DMUT_K_NOTOMB"}, Expect: []string{"p12_late"},
			What: "ClaimCancellation records a key nothing claimed canceled without its tombstone: a late duplicate charges"},
		{Name: "mutant/cancel-fences-unproven-send", Model: "cancelkey.pml", Flags: []string{"-DREQS2=0", "-DMUT_K_NOPROOF"}, Expect: []string{"p12_late"},
			What: "an expired lease fenced and canceled without send_attempts = sends_not_sent: the charge in flight lands"},
		{Name: "mutant/cancel-leaves-authorization", Model: "cancelkey.pml", Flags: []string{"-DMUT_K_HOLDLEFT"}, Expect: []string{"p12_net"},
			What: "FinishCancellation takes an authorization (requires_capture) for a payment that charged nothing"},

		{Name: "mutant/attempts-failover-after-unknown", Model: "attempts.pml", Flags: with(noJoinStall, "-DMUT_FAILOVER_UNKNOWN"), Expect: []string{"p13_once"},
			What: "the next attempt starts after an unknown outcome too: the first account's charge lands beside the second's"},
		{Name: "mutant/attempts-share-order-id", Model: "attempts.pml", Flags: with(noJoinStall, "-DMUT_SAME_ORDER_ID", "-DSHARED=1"), Expect: []string{"p13_kept", "p13_answers", "p13_agree"},
			What: "attempt 2 reuses attempt 1's order id at a second account of the same PSP: the check of attempt 1 finds attempt 2's charge and refunds it"},

		// Known gaps of main: each must produce its counter-example (README, "Gaps").
		{Name: "gap/notice-fenced-by-stale-decline", Model: "notice.pml", Flags: []string{"-DDECLFINAL=0"}, Expect: []string{"p7_truth"},
			What: "a success report fenced by a decline another replica read just before is acknowledged unapplied"},
		{Name: "gap/refund-contradicted-past-its-payment", Model: "notice.pml", Flags: []string{"-DREFUND=1", "-DOTHERREF=1"}, Expect: []string{"p7_truth"},
			What: "a failed refund the PSP carried out stays failed when another refund took its amount (ErrExceedsPayment)"},
		{Name: "gap/purged-before-fan-out", Model: "delivery.pml", Flags: []string{"-DLATEFAN=1"}, Expect: []string{"p9_lost"},
			What: "an event older than the retention before the fan-out reached it is purged with no delivery made"},
	}
	for i := range c {
		if len(c[i].Expect) > 0 {
			c[i].Quick = true // a counter-example is found in a moment
		} else {
			// Only the charge, refund and attempt worlds run to millions
			// of states for long; the others are searched faster than -O2
			// compiles them.
			c[i].Optimize = !quick && (c[i].Model == "charge.pml" || c[i].Model == "refund.pml" || c[i].Model == "attempts.pml")
			if c[i].Model == "attempts.pml" {
				c[i].HashBits = 24 // up to 12 M states: 2^26 slots would be 512 MB more
			}
		}
	}
	if !quick {
		return c
	}
	var q []Check
	for _, x := range c {
		if !x.Quick {
			continue
		}
		if x.Model == "charge.pml" && !slices.Contains(x.Flags, "-DREQS2=1") {
			x.Flags = with(x.Flags, "-DREQS2=1")
		}
		if x.Model == "capture.pml" && !slices.Contains(x.Flags, "-DREQS1=1") {
			x.Flags = with(x.Flags, "-DREQS1=1") // key 1's client sends one request
		}
		if x.Model == "attempts.pml" && len(x.Expect) == 0 {
			x.Flags = with(x.Flags, "-DREQS2=0") // one client worker
		}
		q = append(q, x)
	}
	return q
}
