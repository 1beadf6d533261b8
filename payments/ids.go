package payments

import "strings"

// Ids. The gateway names every object it makes with its kind's prefix and
// a ULID: 26 characters of Crockford's base32, upper case, the first at
// most 7 (pay_01M8SVRZDH8JWSTQVXXY9DNHZC). Text of another shape can name
// nothing, and is refused before it reaches the database, whose ASCII
// columns answer other text (pay_…, with its ellipsis) with an error
// rather than a miss.
const (
	PaymentIDPrefix = "pay_"
	RefundIDPrefix  = "re_"
	EventIDPrefix   = "evt_"
)

// ulidLen is the length of a ULID's text.
const ulidLen = 26

// crockford is the alphabet of a ULID's text, as ulid writes it.
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// WellFormedID reports whether id is prefix followed by a ULID as the
// gateway writes one: whether it could name an object of that kind.
func WellFormedID(prefix, id string) bool {
	rest, ok := strings.CutPrefix(id, prefix)
	if !ok || len(rest) != ulidLen || rest[0] > '7' {
		return false
	}
	for i := 0; i < len(rest); i++ {
		if strings.IndexByte(crockford, rest[i]) < 0 {
			return false
		}
	}
	return true
}
