//! What relock-client's and lockctl's tests ask through the client itself (options, clients,
//! holds), defined once for both suites (feature `client`: the module's tests do not build the
//! client).
