package gateway

import (
	"context"
	"iter"
	"maps"
	"net/url"
	"slices"
)

// page is one page of any listing.
type page[T any] struct {
	Data    []T  `json:"data"`
	HasMore bool `json:"has_more"`
}

// paginate walks a listing from q, page by page, each request retried as
// any read is. The walk moves away from its cursor: on to older objects
// with starting_after, or (backward) on to newer ones with ending_before,
// each page then yielded oldest first. The cursor of the next page is the
// last object yielded. The sequence may be ranged over again: each walk
// starts from q.
func paginate[T any](ctx context.Context, c *Client, path string, q url.Values, backward bool, id func(T) string, opts []CallOption) iter.Seq2[T, error] {
	cursor := "starting_after"
	if backward {
		cursor = "ending_before"
	}
	return func(yield func(T, error) bool) {
		q := maps.Clone(q)
		if q == nil {
			q = url.Values{}
		}
		for {
			var p page[T]
			if err := c.do(ctx, get(path, q, opts), &p); err != nil {
				var zero T
				yield(zero, err)
				return
			}
			if backward {
				slices.Reverse(p.Data)
			}
			for _, v := range p.Data {
				if !yield(v, nil) {
					return
				}
			}
			if !p.HasMore || len(p.Data) == 0 {
				return
			}
			q.Set(cursor, id(p.Data[len(p.Data)-1]))
		}
	}
}
