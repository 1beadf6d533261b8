package main

import (
	"context"
	"fmt"

	"gateway/merchants"
	"gateway/mysql"
)

// Browser checkout administration: a merchant's publishable keys and the
// browser origins its checkout pages are served from. Replicas apply a
// change within GATEWAY_AUTH_CACHE_TTL.

// withBrowserAccess runs fn with browser access administration on the database.
func withBrowserAccess(ctx context.Context, dsn dsnConfig, fn func(*merchants.BrowserAccess) error) error {
	return withStore(ctx, dsn, func(st *mysql.Store) error { return fn(merchants.NewBrowserAccess(st, nil)) })
}

// publishableKeysCmd is `gateway merchants publishable-keys`.
type publishableKeysCmd struct {
	Create publishableCreateCmd `cmd:"" help:"Mint a publishable key for a merchant; prints it as JSON. It is public: it goes into the checkout page."`
	List   publishableListCmd   `cmd:"" help:"List a merchant's publishable keys: prefixes and dates."`
	Revoke publishableRevokeCmd `cmd:"" help:"Revoke a merchant's active publishable key by its visible prefix."`
}

type publishableCreateCmd struct {
	Merchant string `name:"merchant" required:"" placeholder:"ID" id:"mer_" help:"the merchant's id (mer_…)"`
}

func (p *publishableCreateCmd) Run(ctx context.Context, a *app, c *merchantsCmd) error {
	return withBrowserAccess(ctx, c.DB, func(b *merchants.BrowserAccess) error {
		key, err := b.CreatePublishableKey(ctx, p.Merchant)
		if err != nil {
			return adminError(err)
		}
		return writeJSON(a.stdout, struct {
			MerchantID     string `json:"merchant_id"`
			PublishableKey string `json:"publishable_key"`
			Prefix         string `json:"prefix"`
		}{p.Merchant, key.Plaintext, key.Prefix})
	})
}

type publishableListCmd struct {
	Merchant string `name:"merchant" required:"" placeholder:"ID" id:"mer_" help:"the merchant's id (mer_…)"`
	JSON     bool   `name:"json" help:"print one JSON document instead of a table"`
}

func (p *publishableListCmd) Run(ctx context.Context, a *app, c *merchantsCmd) error {
	return withBrowserAccess(ctx, c.DB, func(b *merchants.BrowserAccess) error {
		keys, err := b.PublishableKeys(ctx, p.Merchant)
		if err != nil {
			return adminError(err)
		}
		return writeKeys(a, p.Merchant, keys, p.JSON)
	})
}

type publishableRevokeCmd struct {
	Merchant string `name:"merchant" required:"" placeholder:"ID" id:"mer_" help:"the merchant's id (mer_…)"`
	Prefix   string `name:"prefix" required:"" placeholder:"pk_XXXXXXXX" ascii:"" help:"the key's visible prefix, as publishable-keys list shows it"`
}

func (p *publishableRevokeCmd) Run(ctx context.Context, a *app, c *merchantsCmd) error {
	return withBrowserAccess(ctx, c.DB, func(b *merchants.BrowserAccess) error {
		if err := b.RevokePublishableKey(ctx, p.Merchant, p.Prefix); err != nil {
			return adminError(err)
		}
		fmt.Fprintf(a.stdout, "revoked %s of merchant %s (replicas stop accepting it within GATEWAY_AUTH_CACHE_TTL)\n", p.Prefix, p.Merchant)
		return nil
	})
}

// originsCmd is `gateway merchants origins`.
type originsCmd struct {
	Add    originsAddCmd    `cmd:"" help:"Allow a browser origin (https://shop.example, http://localhost:3000) for a merchant."`
	Remove originsRemoveCmd `cmd:"" help:"Take a browser origin off a merchant's list."`
	List   originsListCmd   `cmd:"" help:"List the browser origins a merchant allows."`
}

type originsAddCmd struct {
	Merchant string `name:"merchant" required:"" placeholder:"ID" id:"mer_" help:"the merchant's id (mer_…)"`
	Origin   string `name:"origin" required:"" placeholder:"URL" help:"scheme://host[:port], as browsers send it in Origin"`
}

func (o *originsAddCmd) Run(ctx context.Context, a *app, c *merchantsCmd) error {
	return withBrowserAccess(ctx, c.DB, func(b *merchants.BrowserAccess) error {
		origin, added, err := b.AllowOrigin(ctx, o.Merchant, o.Origin)
		if err != nil {
			return adminError(err)
		}
		if !added {
			fmt.Fprintf(a.stdout, "merchant %s already allows %s\n", o.Merchant, origin)
			return nil
		}
		fmt.Fprintf(a.stdout, "merchant %s allows %s (replicas within GATEWAY_AUTH_CACHE_TTL)\n", o.Merchant, origin)
		return nil
	})
}

type originsRemoveCmd struct {
	Merchant string `name:"merchant" required:"" placeholder:"ID" id:"mer_" help:"the merchant's id (mer_…)"`
	Origin   string `name:"origin" required:"" placeholder:"URL" help:"the origin, as origins list shows it"`
}

func (o *originsRemoveCmd) Run(ctx context.Context, a *app, c *merchantsCmd) error {
	return withBrowserAccess(ctx, c.DB, func(b *merchants.BrowserAccess) error {
		origin, err := b.DisallowOrigin(ctx, o.Merchant, o.Origin)
		if err != nil {
			return adminError(err)
		}
		fmt.Fprintf(a.stdout, "merchant %s no longer allows %s (replicas within GATEWAY_AUTH_CACHE_TTL)\n", o.Merchant, origin)
		return nil
	})
}

type originsListCmd struct {
	Merchant string `name:"merchant" required:"" placeholder:"ID" id:"mer_" help:"the merchant's id (mer_…)"`
	JSON     bool   `name:"json" help:"print one JSON document instead of one origin a line"`
}

func (o *originsListCmd) Run(ctx context.Context, a *app, c *merchantsCmd) error {
	return withBrowserAccess(ctx, c.DB, func(b *merchants.BrowserAccess) error {
		origins, err := b.Origins(ctx, o.Merchant)
		if err != nil {
			return adminError(err)
		}
		if o.JSON {
			return writeJSON(a.stdout, struct {
				MerchantID string   `json:"merchant_id"`
				Origins    []string `json:"origins"`
				Count      int      `json:"count"`
			}{o.Merchant, origins, len(origins)})
		}
		for _, origin := range origins {
			fmt.Fprintln(a.stdout, origin)
		}
		fmt.Fprintf(a.stdout, "%d origin(s)\n", len(origins))
		return nil
	})
}
