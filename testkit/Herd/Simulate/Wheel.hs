-- | The simulated host's timers: a wheel of ticks. A timer lands in the
-- slot of the first tick at or after its deadline; expiring takes every
-- slot whose tick has come, in tick order, each in the order its timers
-- were set. Setting and expiring cost a map step each, whatever the number
-- of timers, and the next deadline is the lowest slot's.
--
-- Promises (checked by properties in "SimulateSpec"): a timer never
-- expires before its deadline, and once time reaches its deadline plus
-- one tick it has expired; timers expire in deadline order up to a tick,
-- and every timer set expires exactly once.
module Herd.Simulate.Wheel
  ( Wheel
  , newWheel
  , setTimer
  , expire
  , nextDeadline
  , wheelSize
  ) where

import qualified Data.IntMap.Strict as IM

-- | Timers carrying values of type @a@.
data Wheel a = Wheel
  { wTick  :: !Double
  , wSlots :: !(IM.IntMap [a])  -- ^ per tick number, newest first
  , wSize  :: !Int
  }

-- | An empty wheel whose ticks are this many seconds apart (at least a
-- microsecond).
newWheel :: Double -> Wheel a
newWheel tick = Wheel (max 1e-6 tick) IM.empty 0

-- | Set a timer for this deadline (seconds on the caller's clock).
setTimer :: Double -> a -> Wheel a -> Wheel a
setTimer deadline x w =
  w { wSlots = IM.insertWith (++) (ceiling (deadline / wTick w)) [x] (wSlots w), wSize = wSize w + 1 }

-- | The timers whose tick has come by this time, in order, and the wheel
-- without them.
expire :: Double -> Wheel a -> ([a], Wheel a)
expire now w = (concatMap reverse (IM.elems due), w { wSlots = later, wSize = wSize w - sum (map length (IM.elems due)) })
  where
    tick = floor (now / wTick w)
    (before, current, later) = IM.splitLookup tick (wSlots w)
    due = maybe before (\xs -> IM.insert tick xs before) current

-- | When the earliest timer's tick comes, if any timer is set.
nextDeadline :: Wheel a -> Maybe Double
nextDeadline w = (\(k, _) -> fromIntegral k * wTick w) <$> IM.lookupMin (wSlots w)

-- | How many timers are set.
wheelSize :: Wheel a -> Int
wheelSize = wSize
