package reconcile

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/robfig/cron/v3"
)

// ParseSchedule checks a cron spec ("@every 30s", "*/1 * * * *"); "off"
// means no schedule and returns a nil schedule.
func ParseSchedule(spec string) (cron.Schedule, error) {
	if spec == "off" {
		return nil, nil
	}
	s, err := cron.ParseStandard(spec)
	if err != nil {
		return nil, fmt.Errorf("invalid schedule %q (use a cron spec, @every 30s, or off): %w", spec, err)
	}
	return s, nil
}

// Scheduler runs a reconciler's passes on a schedule. A pass still running
// when the next is due is not doubled: the next is skipped.
type Scheduler struct {
	cron   *cron.Cron
	cancel context.CancelFunc
}

// Schedule starts running r on sched. Stop it with Stop.
func Schedule(sched cron.Schedule, r *Reconciler, log *slog.Logger) *Scheduler {
	ctx, cancel := context.WithCancel(context.Background())
	c := cron.New(cron.WithChain(cron.Recover(cronLogger{log}), cron.SkipIfStillRunning(cronLogger{log})))
	c.Schedule(sched, cron.FuncJob(func() {
		sum, err := r.RunOnce(ctx)
		if err != nil && ctx.Err() == nil {
			log.Error("reconcile pass failed", "err", err)
		}
		if len(sum.Results) > 0 || sum.Purged > 0 {
			log.Info("reconcile pass", "keys", len(sum.Results), "purged", sum.Purged,
				"needs_review", sum.NeedsReview, "elapsed", sum.Elapsed.String())
		}
	}))
	c.Start()
	return &Scheduler{cron: c, cancel: cancel}
}

// Stop cancels a running pass and waits for it to return.
func (s *Scheduler) Stop() {
	s.cancel()
	<-s.cron.Stop().Done()
}

// cronLogger adapts slog to cron's logger.
type cronLogger struct{ log *slog.Logger }

func (l cronLogger) Info(msg string, kv ...any) { l.log.Debug("cron: "+msg, kv...) }
func (l cronLogger) Error(err error, msg string, kv ...any) {
	l.log.Error("cron: "+msg, append(kv, "err", err)...)
}
