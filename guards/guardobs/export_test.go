package guardobs

// TokenGapBounds lets the package's tests check the histogram's boundaries.
var TokenGapBounds = tokenGapBounds
