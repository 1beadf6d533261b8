package psp

// Checkout is how a PSP's payments start at the customer's front end in a
// two-step checkout: the gateway creates the payment first, the front end
// starts the PSP's own client (a payment widget, a card form) with the
// payment's order id and amount and with what Checkout says, and the
// gateway then confirms the payment with the client's result. Every value
// here is public: a Checkout never holds a secret.
type Checkout struct {
	// Client names the PSP's client side the front end starts
	// (ClientTossWidget, ClientStripeJS, ClientNone).
	Client string
	// PublishableKey is the key the PSP gives merchants for its client
	// library (Toss's client key, Stripe's publishable key): public by
	// design. Empty when the client needs none or none is configured.
	PublishableKey string
	// ResultField names the confirm request's field that carries the
	// client's result: ResultPaymentKey (Toss's paymentKey) or
	// ResultPaymentMethod (a payment method id).
	ResultField string
}

// Clients and result fields of Checkout.
const (
	// ClientTossWidget: Toss's payment widget, opened with the order id and
	// the amount; its success URL carries paymentKey, orderId and amount.
	ClientTossWidget = "toss_payment_widget"
	// ClientStripeJS: Stripe.js (Elements) collects a PaymentMethod; a card
	// that needs 3-D Secure then comes back as a next action to handle.
	ClientStripeJS = "stripe_js"
	// ClientNone: no client to start; the payment method is known already
	// (the fake PSP's fixed methods, say).
	ClientNone = "none"

	ResultPaymentKey    = "payment_key"
	ResultPaymentMethod = "payment_method"
)
