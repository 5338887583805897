package lockclient

// CheckLockName is checkName, for the fuzz test of lock name validation.
var CheckLockName = checkName
