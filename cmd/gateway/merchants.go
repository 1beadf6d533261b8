package main

import (
	"context"
	"errors"
	"fmt"

	"gateway/errs"
	"gateway/merchants"
	"gateway/versions"
)

// merchantsCmd is `gateway merchants`: merchants and their API keys.
type merchantsCmd struct {
	DB dsnConfig `embed:""`

	Create merchantsCreateCmd `cmd:"" help:"Create a merchant; prints its id and first API key (shown once) as JSON."`
	List   merchantsListCmd   `cmd:"" help:"List the merchants with their key counts."`
	Keys   keysCmd            `cmd:"" help:"Create, list and revoke a merchant's API keys. Rotation: create, deploy, revoke the old one."`
	// Dated API versions (docs/design.md §18).
	Version merchantsVersionCmd `cmd:"" help:"Show a merchant's API version, or pin it to another (--set): its requests that name none (Gateway-Version) are answered in it."`

	// Browser checkout (browser.go).
	PublishableKeys publishableKeysCmd `cmd:"" name:"publishable-keys" help:"Create, list and revoke the publishable keys (pk_…) a merchant's checkout pages confirm payments with."`
	Origins         originsCmd         `cmd:"" help:"Add, remove and list the browser origins a merchant's checkout pages are served from (CORS)."`
}

func (c *merchantsCmd) check() []error { return c.DB.require() }

type merchantsCreateCmd struct {
	Name string `name:"name" required:"" help:"the merchant's display name"`
}

func (m *merchantsCreateCmd) Run(ctx context.Context, a *app, c *merchantsCmd) error {
	return withMerchants(ctx, c.DB, func(adm *merchants.Admin) error {
		merchant, key, err := adm.CreateMerchant(ctx, m.Name)
		if err != nil {
			return adminError(err)
		}
		return writeJSON(a.stdout, struct {
			MerchantID string `json:"merchant_id"`
			APIKey     string `json:"api_key"`
		}{merchant.ID, key.Plaintext})
	})
}

type merchantsVersionCmd struct {
	Merchant string `name:"merchant" required:"" placeholder:"ID" id:"mer_" help:"the merchant's id (mer_…)"`
	Set      string `name:"set" placeholder:"YYYY-MM-DD" help:"the version to pin the merchant to (see docs/versions.md)"`
}

func (v *merchantsVersionCmd) Run(ctx context.Context, a *app, c *merchantsCmd) error {
	return withMerchants(ctx, c.DB, func(adm *merchants.Admin) error {
		var m merchants.Merchant
		var err error
		if v.Set == "" {
			m, err = adm.Merchant(ctx, v.Merchant)
		} else {
			m, err = adm.SetAPIVersion(ctx, v.Merchant, v.Set)
		}
		if err != nil {
			return adminError(err)
		}
		return writeJSON(a.stdout, struct {
			MerchantID string `json:"merchant_id"`
			APIVersion string `json:"api_version"`
			Latest     string `json:"latest"`
		}{m.ID, m.APIVersion, string(versions.Latest)})
	})
}

type merchantsListCmd struct {
	JSON bool `name:"json" help:"print one JSON document instead of a table"`
}

type merchantJSON struct {
	ID          string  `json:"id"`
	Name        string  `json:"name"`
	APIVersion  string  `json:"api_version"`
	CreatedAt   *string `json:"created_at"`
	ActiveKeys  int     `json:"active_keys"`
	RevokedKeys int     `json:"revoked_keys"`
}

func (l *merchantsListCmd) Run(ctx context.Context, a *app, c *merchantsCmd) error {
	return withMerchants(ctx, c.DB, func(adm *merchants.Admin) error {
		ms, err := adm.Merchants(ctx)
		if err != nil {
			return adminError(err)
		}
		if l.JSON {
			out := struct {
				Merchants []merchantJSON `json:"merchants"`
				Count     int            `json:"count"`
			}{Merchants: []merchantJSON{}, Count: len(ms)}
			for _, m := range ms {
				out.Merchants = append(out.Merchants, merchantJSON{ID: m.ID, Name: m.Name, APIVersion: m.APIVersion, CreatedAt: jsonTime(m.CreatedAt),
					ActiveKeys: m.ActiveKeys, RevokedKeys: m.RevokedKeys})
			}
			return writeJSON(a.stdout, out)
		}
		tw := newTable(a.stdout, "MERCHANT", "NAME", "API VERSION", "CREATED", "ACTIVE KEYS", "REVOKED KEYS")
		for _, m := range ms {
			row(tw, m.ID, m.Name, m.APIVersion, timestamp(m.CreatedAt), m.ActiveKeys, m.RevokedKeys)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(a.stdout, "%d merchant(s)\n", len(ms))
		return nil
	})
}

// keysCmd is `gateway merchants keys`. Several keys may be active at once,
// so a merchant rotates by creating a key, deploying it, then revoking the old one.
type keysCmd struct {
	Create keysCreateCmd `cmd:"" help:"Mint another API key for a merchant; prints it once as JSON."`
	List   keysListCmd   `cmd:"" help:"List a merchant's keys: prefixes and dates, never secrets."`
	Revoke keysRevokeCmd `cmd:"" help:"Revoke a merchant's active key by its visible prefix."`
}

type keysCreateCmd struct {
	Merchant string `name:"merchant" required:"" placeholder:"ID" id:"mer_" help:"the merchant's id (mer_…)"`
}

func (k *keysCreateCmd) Run(ctx context.Context, a *app, c *merchantsCmd) error {
	return withMerchants(ctx, c.DB, func(adm *merchants.Admin) error {
		key, err := adm.CreateAPIKey(ctx, k.Merchant)
		if err != nil {
			return adminError(err)
		}
		return writeJSON(a.stdout, struct {
			MerchantID string `json:"merchant_id"`
			APIKey     string `json:"api_key"`
			Prefix     string `json:"prefix"`
		}{k.Merchant, key.Plaintext, key.Prefix})
	})
}

type keysListCmd struct {
	Merchant string `name:"merchant" required:"" placeholder:"ID" id:"mer_" help:"the merchant's id (mer_…)"`
	JSON     bool   `name:"json" help:"print one JSON document instead of a table"`
}

type keyJSON struct {
	Prefix    string  `json:"prefix"`
	CreatedAt *string `json:"created_at"`
	RevokedAt *string `json:"revoked_at"`
	Active    bool    `json:"active"`
}

func (k *keysListCmd) Run(ctx context.Context, a *app, c *merchantsCmd) error {
	return withMerchants(ctx, c.DB, func(adm *merchants.Admin) error {
		keys, err := adm.APIKeys(ctx, k.Merchant)
		if err != nil {
			return adminError(err)
		}
		return writeKeys(a, k.Merchant, keys, k.JSON)
	})
}

// writeKeys prints a merchant's keys (API or publishable): a table, or
// with asJSON one document.
func writeKeys(a *app, merchantID string, keys []merchants.StoredKey, asJSON bool) error {
	active := 0
	for _, key := range keys {
		if key.RevokedAt.IsZero() {
			active++
		}
	}
	if asJSON {
		out := struct {
			MerchantID string    `json:"merchant_id"`
			Keys       []keyJSON `json:"keys"`
			Count      int       `json:"count"`
			Active     int       `json:"active"`
		}{MerchantID: merchantID, Keys: []keyJSON{}, Count: len(keys), Active: active}
		for _, key := range keys {
			out.Keys = append(out.Keys, keyJSON{Prefix: key.Prefix, CreatedAt: jsonTime(key.CreatedAt),
				RevokedAt: jsonTime(key.RevokedAt), Active: key.RevokedAt.IsZero()})
		}
		return writeJSON(a.stdout, out)
	}
	tw := newTable(a.stdout, "PREFIX", "CREATED", "REVOKED")
	for _, key := range keys {
		row(tw, key.Prefix, timestamp(key.CreatedAt), timestamp(key.RevokedAt))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "%d key(s), %d active\n", len(keys), active)
	return nil
}

type keysRevokeCmd struct {
	Merchant string `name:"merchant" required:"" placeholder:"ID" id:"mer_" help:"the merchant's id (mer_…)"`
	Prefix   string `name:"prefix" required:"" placeholder:"sk_XXXXXXXX" ascii:"" help:"the key's visible prefix, as keys list shows it"`
	JSON     bool   `name:"json" help:"print one JSON document instead of a sentence"`
}

func (k *keysRevokeCmd) Run(ctx context.Context, a *app, c *merchantsCmd) error {
	return withMerchants(ctx, c.DB, func(adm *merchants.Admin) error {
		if err := adm.RevokeAPIKey(ctx, k.Merchant, k.Prefix); err != nil {
			return adminError(err)
		}
		if k.JSON {
			return writeJSON(a.stdout, struct {
				MerchantID string `json:"merchant_id"`
				Prefix     string `json:"prefix"`
				Revoked    bool   `json:"revoked"`
			}{k.Merchant, k.Prefix, true})
		}
		fmt.Fprintf(a.stdout, "revoked %s of merchant %s (replicas stop accepting it within GATEWAY_AUTH_CACHE_TTL)\n", k.Prefix, k.Merchant)
		return nil
	})
}

// adminError renders a domain error for a terminal: invalid input is a
// usage error (exit 2), with its fields.
func adminError(err error) error {
	var e *errs.Error
	if !errors.As(err, &e) {
		return err
	}
	if (e.Code == errs.CodeInternal || e.Code == errs.CodeUnavailable) && e.Err != nil {
		return e.Err // an operator reads the cause, not the client's message
	}
	msg := e.Message
	for _, f := range e.Fields {
		msg += fmt.Sprintf("; %s %s", f.Field, f.Reason)
	}
	if e.Code == errs.CodeInvalid {
		return usageError{msg}
	}
	return errors.New(msg)
}
